"""Reading what a run wrote: the JUnit schema and reader (:mod:`.junit`), the ``dlperf`` command
(:mod:`.cli`), the Markdown digest, the HTML page, the charts and the change-point history."""
