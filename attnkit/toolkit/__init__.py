"""What an assignment's hidden checks import: ``require`` and ``CheckFailed``, measurements, evidence and
reference helpers. Nothing of the kit above it: a plug-in depends on this and on torch alone."""
