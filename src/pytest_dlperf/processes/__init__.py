"""Running processes from the parent: one child (:mod:`.runner`), paired groups taking rounds in
turn (:mod:`.paired`), device locks (:mod:`.devicelock`) and distributed jobs through their
launchers (:mod:`.distributed`)."""
