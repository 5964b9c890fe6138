"""The soak (issue 20): a victim tenant's chat, stream and embeddings traffic solo and while a
hostile tenant attacks, in alternating blocks, through a real `levergate serve` with every feature
on in front of `levergate sim` (`levergate.testing.soak` runs it; `soak_attack` beside it is the
attacker).
Writes results/soak.{json,md}: the victim's errors and p99 attacked / solo.

    python benchmarks/soak.py                      # 4 rounds of 75 s blocks: 10 minutes
    python benchmarks/soak.py --block-seconds 150 --rounds 3
    python benchmarks/soak.py --only 6 --block-seconds 10 --rounds 1 --out /tmp/soak-6
    python benchmarks/soak.py --smoke
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from contextlib import suppress
from pathlib import Path

from harness import Output, add_output_options, stamp

from levergate.testing.soak import Plan, markdown, soak

POSTGRES = os.environ.get("LEVERGATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")


def postgres_database() -> str | None:
    """A fresh database for the run's job store, or None (SQLite) when PostgreSQL is not here."""
    import psycopg

    name = f"levergate_soak_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True, connect_timeout=3) as db:
            db.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        print(f"PostgreSQL not reachable ({exc}): the job store is SQLite", file=sys.stderr)
        return None
    return f"{POSTGRES}/{name}"


def drop(dsn: str) -> None:
    import psycopg

    name = dsn.rsplit("/", 1)[1]
    with suppress(psycopg.Error), psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--block-seconds", type=float, default=75.0)
    parser.add_argument("--rounds", type=int, default=4, help="solo + attacked pairs")
    parser.add_argument("--rate", type=float, default=16.0, help="victim requests a second")
    parser.add_argument("--sqlite", action="store_true", help="the job store in SQLite")
    parser.add_argument("--only", default="", help="the attack's items only, e.g. 6 or 3,4")
    parser.add_argument(
        "--attacker-cpus",
        default="",
        help="pin the attacker (taskset -c), e.g. 1: a diagnosis of CPU sharing",
    )
    add_output_options(parser)
    args = parser.parse_args()
    out = Output.of(args)
    if args.smoke:
        args.block_seconds, args.rounds = 2.0, 1
    load = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    dsn = None if args.sqlite else postgres_database()
    plan = Plan(
        block_seconds=args.block_seconds,
        rounds=args.rounds,
        victim_rate=args.rate,
        postgres_dsn=dsn,
        # A smoke run: an attack begun a second before its block, a solo block after at most
        # a second's wait for the processes to idle.
        settle_seconds=0.5 if args.smoke else 4.0,
        **({"warmup_seconds": 1.0, "quiet_seconds": 1.0} if args.smoke else {}),
        only=args.only,
        attacker_cpus=args.attacker_cpus,
    )
    try:
        result = {**stamp(), "load_at_start": load, **soak(Path(tempfile.mkdtemp()), plan)}
    finally:
        if dsn:
            drop(dsn)
    result["load_at_end"] = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    out.write("soak", result, markdown(result, load=f"{load}; at the end {result['load_at_end']}"))


if __name__ == "__main__":
    main()
