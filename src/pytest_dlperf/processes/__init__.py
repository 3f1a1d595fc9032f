"""Running processes from the parent: one child (:mod:`.runner`), paired groups taking rounds in
turn (:mod:`.paired`: their order in :mod:`.schedule`, each child in :mod:`.paced_child`), device
locks (:mod:`.devicelock`), killing a child's process group (:mod:`.groups`) and distributed jobs
through their launchers (:mod:`.distributed`)."""
