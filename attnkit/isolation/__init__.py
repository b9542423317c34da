"""Everything that runs or reads untrusted code, behind one narrow call each: ``sandbox.run_child`` (a
submission's experiments), ``sandbox.run_notebook`` (a kernel run) and ``untrusted.read_notebook`` /
``student_code`` (parsing a notebook). Nothing here imports the engine: arrows point down to here."""
