"""Running processes from the parent: one child (:mod:`.runner`), paired groups taking rounds in
turn (:mod:`.paired`), device locks (:mod:`.devicelock`), killing a child's process group
(:mod:`.groups`) and distributed jobs through their launchers (:mod:`.distributed`)."""
