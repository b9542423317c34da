"""nbgrader, extended through its documented classes and configuration: the autograde and feedback steps
(preprocessors named in the course's nbgrader_config.py), inert pages, the teaching report, and the one
patch (``patch``) where nbgrader has no extension point."""
