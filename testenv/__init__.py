"""gitray's real test environment on loopback (see docs/testenv.md).

Stdlib-only modules (usable before project dependencies are installed):

- `build`   probe the Go module proxy, build pinned binaries into the version-keyed cache
- `control` `up(state_dir)` / `down(state_dir)` / `status` / `State` (PIDs, ports, kubeconfig)
- `procs`   sessions, PIDs, listening sockets, machine-wide claims
- `cli`     `scripts/testenv build|up|down|status|env`

Needs the project's dependencies (kubernetes, ray):

- `raypods` the Ray pod runner process started by `up`
- `helpers` `TestEnv` (API clients + wait helpers), `wait_for`, `http_json`, `raycluster_manifest`

Typical use outside pytest (bench/, demos)::

    from testenv import control
    from testenv.helpers import TestEnv
    state = control.up(state_dir)          # or control.State.load(existing_dir)
    env = TestEnv(state)
    ...
    control.down(state_dir)
"""
