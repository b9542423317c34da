"""Process start-up: leave out the one import that costs a second and that no attnkit command uses.

jsonschema (imported by nbformat and nbgrader) imports `rfc3987_syntax`, when installed, for its
"iri" string format; building that package's grammar takes about 1.4 s at every process start
here. Format checks are off unless a validator is given a format checker, and no schema that
attnkit, nbformat or nbgrader validate asks for that format, so attnkit's own processes do
without it (jsonschema treats it as not installed). `nbgrader` run on its own still imports it.
"""
import sys

if "jsonschema" not in sys.modules:
    sys.modules.setdefault("rfc3987_syntax", None)
