"""The incremental RayService upgrade's room of the engine: traffic steps, pause/promote/abort
control and its signals, analysis checks, Gateway metrics and the probes that read them."""
