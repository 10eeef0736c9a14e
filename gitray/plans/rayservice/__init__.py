"""The RayService's room of the planner: its planner, planning context, in-place and
incremental upgrades, Gateway routing, serve Service, Serve checks, analysis, upgrade options
and spec fields (pure)."""
