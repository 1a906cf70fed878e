"""The `tracedojo` command (also `python -m app`): contract 5 of DESIGN.md.

Data goes to stdout (JSON where it is data), errors to stderr as one line, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app.instances import parse_params, parse_seed
from app.scenario import InstanceError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage block
        sys.stderr.write(f"tracedojo: error: {message}\n")
        raise SystemExit(2)


def _instance(args):
    import scenarios

    scn = scenarios.get(args.scenario)
    return scn.instance(parse_seed(args.seed, args.canonical), parse_params(args.param), version=args.version,
                        fixed=getattr(args, "fixed", False))


def cmd_scenarios(args) -> None:
    import scenarios

    rows = [{"id": s.id, "version": s.version, "older": list(s.older), "title": s.title, "signature": s.signature,
             "params": s.Params.describe()} for s in scenarios.REGISTRY.values()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    width = max(len(r["id"]) for r in rows)
    for r in rows:
        print(f"{r['id']:<{width}}  v{r['version']}  {r['title']}: {r['signature']}"
              + (f" (also builds v{', v'.join(map(str, r['older']))})" if r["older"] else ""))


def cmd_generate(args) -> None:
    from app.trace import kineto

    inst = _instance(args)
    trace = inst.trace(args.rank)
    if args.output:
        kineto.save(trace, args.output, inst.trace_name(args.rank))
        print(f"wrote {args.output}: {trace.event_count():,} events", file=sys.stderr)
    else:
        kineto.write(trace, sys.stdout, inst.trace_name(args.rank))


def cmd_key(args) -> None:
    print(json.dumps(_instance(args).key, indent=2))


def cmd_fidelity(args) -> None:
    from app.analysis import fidelity

    rep = fidelity.report(_instance(args), args.rank)
    print(json.dumps(rep, indent=2) if args.json else fidelity.format_text(rep))


def cmd_analyze(args) -> None:
    from app.analysis import hta, read, text
    from app.trace.importer import TraceImportError, load

    try:
        traces = [load(path) for path in args.traces]
    except TraceImportError as e:
        raise InstanceError(str(e)) from None

    reads = [read.read(t) for t in traces]
    for r, t in zip(reads, traces):
        r.pop("metrics", None)
        if args.hta:
            r["hta"] = hta.figures(t)
    if len(traces) > 1:
        multi = read.read_ranks(traces)
        result = {"ranks": reads, "rank_ids": multi["rank_ids"], "rank_compute_ms": multi["rank_compute_ms"],
                  "max_over_median": multi["max_over_median"], "straggler_rank": multi["straggler_rank"],
                  "late_arrivals": multi["late_arrivals"]}
    else:
        result = reads[0]
    if args.json:
        print(json.dumps(result, indent=2, default=float))
        return
    print("\n\n".join(text.render(r, r.get("hta")) for r in reads))
    if len(traces) > 1:
        print(f"\nPer-rank compute per step (ms): {result['rank_compute_ms']}; max/median "
              f"{result['max_over_median']}; last to arrive at the collectives: rank {result['straggler_rank']}.")


def cmd_sql(args) -> None:
    import tempfile

    from app.analysis import sql
    from app.trace.importer import TraceImportError

    # The console runs only on a database file, opened read-only per query as the web app's
    # are (one sandbox, not two): the trace goes into a temporary one for this command.
    with tempfile.TemporaryDirectory(prefix="tracedojo-sql-") as tmp:
        try:
            result = sql.run(sql.database(args.trace, Path(tmp) / "trace.duckdb"), args.query)
        except (TraceImportError, sql.QueryRefused, sql.QueryFailed) as e:
            raise InstanceError(str(e)) from None
    print(json.dumps(result.as_json(), indent=1))


def cmd_tool(args) -> None:
    from app import tools

    options = {"kernel": args.kernel} if args.kernel else {}
    inst = _instance(args)
    try:
        if args.json:
            print(json.dumps({"tool": args.tool_id, "applicable": True, "output": tools.run(args.tool_id, inst, **options),
                              "chart": tools.chart(args.tool_id, inst, **options)}))
        else:
            print(tools.run(args.tool_id, inst, **options))
    except tools.ToolNotApplicable as e:
        if args.json:
            print(json.dumps({"tool": args.tool_id, "applicable": False, "reason": str(e)}))
        else:
            print(f"{args.tool_id} does not apply here: {e}")


def cmd_score(args) -> None:
    from app.scoring.score import NarrationError, score

    inst = _instance(args)
    try:
        text = Path(args.narration).read_text(encoding="utf-8") if args.narration != "-" else sys.stdin.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InstanceError(f"cannot read the narration {args.narration}: {e}") from None
    runs = [{"tool": t} for t in (args.ran or [])]
    try:
        report = score(inst.key, inst.scenario.rubric, text, runs, timed=args.timed)
    except NarrationError as e:
        raise InstanceError(str(e)) from None
    print(json.dumps(report, indent=1, default=float))


def cmd_serve(args) -> None:
    import uvicorn

    from app.config import get_settings
    from app.db.base import DatabaseMissing, prepare_database

    settings = get_settings()
    try:
        # Once here, before any worker starts; each worker's create_app() then finds the
        # schema at head (under the same lock), so only this step may start a new database.
        prepare_database(settings.database_url, settings.data_dir, settings.create_db or args.create_db)
    except DatabaseMissing as e:
        raise InstanceError(str(e)) from None
    # Workers are separate processes sharing nothing but the database and data/: uvicorn
    # imports the factory in each.
    # timeout_graceful_shutdown: a live round's event streams stay open; on a restart they
    # are cut after 3 s and the browsers reconnect and resume from their Last-Event-ID.
    uvicorn.run("app.web.main:create_app", factory=True, host=args.host, port=args.port, workers=args.workers,
                log_level="warning" if args.quiet else "info", timeout_graceful_shutdown=3)


def cmd_user_add(args) -> None:
    import getpass
    import os

    from app.accounts import AccountError, service
    from app.config import get_settings
    from app.db.base import DatabaseMissing, StoreUnavailable, prepare_database, store_for

    try:
        # the input first: a typo in the email is not worth typing a password twice for
        email, role, team = service.check_email(args.email), service.check_role(args.role), service.check_slug(args.team)
        password = os.environ.get("TRACEDOJO_PASSWORD")
        if password is not None:
            service.check_password(password)
        settings = get_settings()
        prepare_database(settings.database_url, settings.data_dir, settings.create_db or args.create_db)
        store = store_for(settings.database_url, settings.db_busy_timeout_s)
        # an existing account keeps its password unless one is given (a new team or role
        # needs none); a new account needs one
        existing = service.has_account(store, email)
        if password is None and not existing:
            if not sys.stdin.isatty():
                raise AccountError("no password: set TRACEDOJO_PASSWORD, or run in a terminal to be asked")
            password = service.check_password(getpass.getpass(f"Password for {email}: "))
            if getpass.getpass("The same again: ") != password:
                raise AccountError("the two passwords differ")
        added = service.add_user(store, email, password, role, team)
    except (AccountError, DatabaseMissing, StoreUnavailable) as e:
        raise InstanceError(str(e)) from None
    print(f"{added.email} is {role} of team {team}: {', '.join(added.changes) or 'as before, nothing changed'}")


def cmd_demo(args) -> None:
    import os
    import secrets

    from app.accounts import AccountError, service
    from app.config import get_settings
    from app.db.base import DatabaseMissing, StoreUnavailable, prepare_database, store_for
    from app.review import demo
    from app.rounds import live, questions

    try:
        team = service.check_slug(args.team)
        given = os.environ.get("TRACEDOJO_PASSWORD")
        password = service.check_password(given) if given is not None else secrets.token_urlsafe(12)
        settings = get_settings()
        prepare_database(settings.database_url, settings.data_dir, settings.create_db or args.create_db)
        store = store_for(settings.database_url, settings.db_busy_timeout_s)
        people, accounts = {}, {}
        for role in ("admin", "interviewer", "reviewer"):
            email = f"{role}@{team}.demo.invalid"  # .invalid: never a real mailbox (RFC 2606)
            # an account from an earlier run keeps its password unless TRACEDOJO_PASSWORD gives one
            setting = given is not None or not service.has_account(store, email)
            people[role] = service.add_user(store, email, password if setting else None, role, team)
            accounts[role] = {"email": email, "password": password if setting else "unchanged (set TRACEDOJO_PASSWORD "
                                                                                    "to set a new one)"}
        interviewer = people["interviewer"]
        team_id = interviewer.team_id(team)
        bank = questions.for_team(store, interviewer, team_id)
        r, token = live.create(store, interviewer, question_id=bank[0].id,
                               link_hours=settings.candidate_link_hours)
        # the review and calibration pages need history: synthetic rounds and scorecards
        filled = None if args.no_data else demo.fill(store, team, rounds=args.rounds, seed=args.seed,
                                                     replace=args.replace_data)
    except (AccountError, DatabaseMissing, StoreUnavailable) as e:
        raise InstanceError(str(e)) from None
    base = args.url.rstrip("/")
    raters = demo.raters_json(team)
    summary = {"skipped": "--no-data"} if filled is None else {
        k: filled[k] for k in ("already", "candidates", "rounds", "gold", "events", "scorecards", "anchors", "seed",
                               "seconds", "note") if k in filled}
    print(json.dumps({
        "team": team, "login_url": f"{base}/login",
        "accounts": accounts,
        "question": bank[0].title, "console_url": f"{base}/rounds/{r.public_id}",
        "candidate_url": f"{base}/r/{token}", "questions_url": f"{base}/questions",
        "demo_data": summary,
        "review_urls": [f"{base}/rounds/{i}/review" for i in (filled or {}).get("review_round_ids", [])],
        "calibration_url": f"{base}/calibration",
        # what the calibration page should recover: levels added to what a read deserves
        "simulated_leniency": {x["email"]: x["leniency_levels"] for x in raters},
        "simulated_raters": raters,
    }, indent=2))


def _instance_args(p: argparse.ArgumentParser, rank: bool = False) -> None:
    p.add_argument("scenario", help="scenario id (see `tracedojo scenarios`)")
    p.add_argument("--seed", help="non-negative integer seed (default 0)")
    p.add_argument("--canonical", action="store_true", help="the seed document's own case")
    p.add_argument("--version", type=int, help="an older version the scenario still builds (default: the current)")
    p.add_argument("--fixed", action="store_true", help="the same instance with its fix applied (where it builds one)")
    if rank:
        p.add_argument("--rank", type=int, default=0, help="which rank's trace (multi-rank scenarios)")
    p.add_argument("--param", action="append", metavar="K=V", help="override a scenario parameter (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tracedojo", description="Trace Dojo: GPU trace-reading practice and interviews.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("scenarios", help="list the scenarios")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_scenarios)
    p = sub.add_parser("generate", help="export an instance's Kineto trace")
    _instance_args(p, rank=True)
    p.add_argument("-o", "--output", type=Path, help="file to write (.json or .json.gz); default stdout")
    p.set_defaults(func=cmd_generate)
    p = sub.add_parser("key", help="print an instance's answer key as JSON")
    _instance_args(p)
    p.set_defaults(func=cmd_key)
    p = sub.add_parser("tool", help="run a measurement on an instance, printed as the real tool prints it")
    _instance_args(p)
    p.add_argument("tool_id", help="nsys-kern-sum, nsys-api-sum, nsys-nvtx-sum, nsys-mem-sum, per-rank, nvidia-smi, "
                   "dcgm, ncu, gemm-microbench, synthetic-data, cuda-graph, ddp-debug, request-log, itl-scatter")
    p.add_argument("--kernel", metavar="REGEX", help="ncu: the kernel to profile (default: the top one)")
    p.add_argument("--json", action="store_true", help="the output and its chart data as JSON")
    p.set_defaults(func=cmd_tool)
    p = sub.add_parser("fidelity", help="an instance's timing distributions beside real torch.profiler traces'")
    _instance_args(p, rank=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_fidelity)
    p = sub.add_parser("analyze", help="the reference read of torch.profiler traces (one per rank)")
    p.add_argument("traces", nargs="+", help="Kineto JSON files (.json or .json.gz)")
    p.add_argument("--json", action="store_true", help="JSON instead of text")
    p.add_argument("--hta", action="store_true", help="add Holistic Trace Analysis' metrics, with its definitions")
    p.set_defaults(func=cmd_analyze)
    p = sub.add_parser("sql", help="a read-only SQL query over a trace (tables slice, track, thread, process, counter)")
    p.add_argument("trace", help="Kineto JSON file (.json or .json.gz)")
    p.add_argument("query", help="one SELECT statement")
    p.set_defaults(func=cmd_sql)
    p = sub.add_parser("score", help="score a narrated read of an instance (the report as JSON)")
    _instance_args(p)
    p.add_argument("narration", help="a text file with the read (- for stdin)")
    p.add_argument("--ran", action="append", metavar="TOOL_ID", help="a measurement run before narrating (repeatable)")
    p.add_argument("--timed", action="store_true", help="said in the 60-second mode (over ~170 words costs points)")
    p.set_defaults(func=cmd_score)
    p = sub.add_parser("serve", help="serve the web app")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1, help="worker processes (each serves any request)")
    p.add_argument("--create-db", action="store_true",
                   help="start on an empty database even though one existed before (its data is gone)")
    p.add_argument("--quiet", action="store_true", help="log warnings only")
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("user", help="staff accounts")
    users = p.add_subparsers(dest="user_command", required=True, parser_class=_Parser)
    p = users.add_parser("add", help="add a staff member to a team (made if missing), or change their role",
                         description="A new account's password comes from TRACEDOJO_PASSWORD, else is asked for twice; "
                         "an existing account keeps its password unless TRACEDOJO_PASSWORD gives a new one.")
    p.add_argument("email")
    p.add_argument("--role", required=True, help="admin, interviewer or reviewer")
    p.add_argument("--team", required=True, help="the team's slug: letters, digits and hyphens")
    p.add_argument("--create-db", action="store_true",
                   help="start on an empty database even though one existed before (its data is gone)")
    p.set_defaults(func=cmd_user_add)
    p = sub.add_parser("demo", help="a team to try live rounds, review and calibration with",
                       description="Makes (or keeps) the team, admin@, interviewer@ and reviewer@<team>.demo.invalid "
                       "with the password in TRACEDOJO_PASSWORD (else a new random one, printed), its question bank, "
                       "and a new round on the first question of the bank; then fills the team with demo data "
                       "(app/review/demo.py): synthetic candidates, ended rounds with their event logs and "
                       "scorecards from simulated interviewers of known leniency, once per team. Prints the URLs "
                       "and the simulation's parameters as JSON.")
    p.add_argument("--team", required=True, help="the team's slug: letters, digits and hyphens")
    p.add_argument("--rounds", type=int, default=60, help="synthetic rounds to make (default 60, at most 500)")
    p.add_argument("--seed", type=int, default=1, help="the simulation's seed (default 1): same seed, same data")
    p.add_argument("--no-data", action="store_true", help="accounts, bank and one round only: no synthetic data")
    p.add_argument("--replace-data", action="store_true",
                   help="delete the team's synthetic candidates and their rounds, and make them anew")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="where the server answers (for the printed links)")
    p.add_argument("--create-db", action="store_true",
                   help="start on an empty database even though one existed before (its data is gone)")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except InstanceError as e:
        print(f"tracedojo: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `tracedojo generate ddp | head`
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
