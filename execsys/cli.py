"""The ``execsys`` command line: argument parsing and dispatch only.

Each subcommand lives in ``execsys/commands/<name>.py`` and exposes ``HELP``
(one line), ``DESCRIPTION`` (what it does, with an example), ``add_arguments``
and ``run(args) -> int``. Command modules import nothing heavy at module level,
so building the parser stays cheap; ``--version`` answers before any of it.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import math
import os
import sys
from collections.abc import Sequence

from execsys import __version__
from execsys.errors import ExecsysError, ExitCode
from execsys.termsafe import shown

# name -> module under execsys.commands. A new command is one module plus one line here.
COMMANDS: dict[str, str] = {
    "doctor": "doctor",
    "init": "init",
    "pin": "pin",
    "verify": "verify",
    "diff": "diff",
    "digest": "digest",
    "probe": "probe",
    "scope": "scope",
    "compare": "compare",
    "explain": "explain",
    "plan": "plan",
    "quant": "quant",
    "ledger": "ledger",
    "fleet": "fleet",
    "shards": "shards",
    "tui": "tui",
    "run": "run",
    "attach": "attach",
    "trust": "trust",
    "receipt": "receipt",
}


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: 'execsys pin: error: ... (see execsys pin --help)'."""

    def error(self, message: str) -> None:  # type: ignore[override]
        from execsys.redact import redact_text

        # argparse echoes the offending value: `--timeout sk-...` must not print the key
        sys.stderr.write(f"{self.prog}: error: {_one_line(redact_text(message))} (see '{self.prog} --help')\n")
        raise SystemExit(ExitCode.USAGE)


def add_common(parser: argparse.ArgumentParser) -> None:
    """Options every subcommand takes."""
    parser.add_argument("--ledger", metavar="PATH", help="ledger file (default: $EXECSYS_LEDGER or the user data dir)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for internal errors")


def _add_common_to_actions(parser: argparse.ArgumentParser) -> None:
    """`execsys plan new ... --ledger X` as well as `execsys plan --ledger X new ...`.

    A command with actions (plan new, quant check, ledger list) parses the words after the action
    with the action's own parser, which must know the common options too. SUPPRESS keeps the action
    parser from overwriting a value given before the action with its default."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for sub in set(action.choices.values()):
            sub.set_defaults(_parser=sub)
            if "--ledger" not in sub._option_string_actions:
                sub.add_argument("--ledger", metavar="PATH", default=argparse.SUPPRESS,
                                 help="ledger file (default: $EXECSYS_LEDGER or the user data dir)")
            if "--debug" not in sub._option_string_actions:
                sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                                 help="show tracebacks for internal errors")
            _add_common_to_actions(sub)


def positive_float(text: str) -> float:
    """argparse type for timeouts and thresholds: a number greater than 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < math.inf:  # also rejects nan; inf is no bound at all
        raise argparse.ArgumentTypeError(f"must be greater than 0 and finite: {text}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type for counts and limits: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text}")
    return value


def add_sources(parser: argparse.ArgumentParser, *, lock_help: str | None = None) -> None:
    """``--config`` and ``--lock``, with the same defaults in every command (see :mod:`execsys.sources`)."""
    parser.add_argument("--config", metavar="FILE",
                        help="the declaration (default: $EXECSYS_CONFIG, else ./execsys.toml)")
    parser.add_argument("--lock", metavar="FILE",
                        help=lock_help or "the pinned identity (default: execsys.lock.json beside the declaration)")
    parser.add_argument("--trust", action="store_true",
                        help="trust the declaration for this run only: its declared commands (layers, restart, "
                             "ready, grader command) may run; nothing is recorded (see execsys trust)")


def add_sign_key(parser: argparse.ArgumentParser) -> None:
    """``--sign-key``: the key that signs the receipts ``run`` and ``attach`` write (execsys.receipt)."""
    parser.add_argument("--sign-key", metavar="PATH",
                        help="sign each receipt with this Ed25519 or ECDSA PEM private key (default: the "
                             "declaration's [receipts] key; none: the receipts are unsigned)")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the documented JSON on stdout and nothing else")


def build_parser(only: str | None = None) -> Parser:
    """The full parser, or with ``only`` a parser holding just that subcommand: each command module
    imported costs start-up time, and `execsys digest` on a large file should be all hashing."""
    parser = Parser(
        prog="execsys",
        description=(
            "Make an evaluation result say which execution system produced it, and measure how far "
            "the stack can move before two runs of the same thing stop agreeing."
        ),
        epilog=(
            "typical session:\n"
            "  execsys doctor                 check the ten environment hazards\n"
            "  execsys init && execsys pin    declare and pin the twelve components\n"
            "  execsys trust                  let a declaration you did not write run its commands\n"
            "  execsys probe restart --endpoint http://127.0.0.1:8000/v1 --cases cases.jsonl\n"
            "  execsys scope                  what comparisons the measurements license\n"
            "  execsys explain A B            why a score changed: what moved, flips, noise, verdict\n"
            "  execsys run -- lm_eval --model local-completions --tasks gsm8k --output_path out\n"
            "                                 the evaluation, gated, watched, verified and recorded\n\n"
            "exit codes: 0 fine, 1 a finding (hazard, drift, instability), 2 usage or input error"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"execsys {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, module_name in COMMANDS.items():
        if only is not None and name != only:
            continue
        module = _load(module_name)
        cmd = sub.add_parser(
            name,
            help=module.HELP,
            description=getattr(module, "DESCRIPTION", module.HELP),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(cmd)
        add_common(cmd)
        _add_common_to_actions(cmd)
        cmd.set_defaults(_module=module, _parser=cmd)
    return parser


def _load(module_name: str):
    return importlib.import_module(f"execsys.commands.{module_name}")


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list in (["--version"], ["-V"]):
        # Answer before building the parser: start-up stays light.
        print(f"execsys {__version__}")
        return ExitCode.OK
    if not args_list and sys.stdin.isatty() and sys.stdout.isatty():
        args_list = ["tui"]
    parser = build_parser(only=args_list[0] if args_list and args_list[0] in COMMANDS else None)
    if not args_list:
        sys.stderr.write("execsys: error: no command given (see 'execsys --help')\n")
        return ExitCode.USAGE
    args, extras = parser.parse_known_args(args_list)
    if extras:
        # name the command (and its help) rather than the top-level parser: 'execsys pin: error: ...'
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extras)}")
    if getattr(args, "_module", None) is None:
        parser.print_help()
        return ExitCode.USAGE
    # --ledger reaches the operations through their options (None: $EXECSYS_LEDGER, else the user data dir)
    args.ledger = getattr(args, "ledger", None) or None
    if getattr(args, "trust", False) is True:
        from execsys import trust

        trust.trust_this_invocation()  # this process only: a child execsys is not trusted by it
    from execsys.console import install_encoding_fallback

    install_encoding_fallback(json_output=bool(getattr(args, "json", False)))
    try:
        code = int(args._module.run(args))
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not in the interpreter's exit
        return code
    except ExecsysError as exc:
        if args.debug:
            raise
        from execsys.redact import redact_text

        sys.stderr.write(f"execsys {args.command}: error: {_one_line(redact_text(str(exc)))}\n")
        return int(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write(f"execsys {args.command}: interrupted\n")
        return 130
    except BrokenPipeError:
        # Output piped into `head` and closed early: not an error worth a traceback.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return ExitCode.OK
    except RecursionError:
        if args.debug:
            raise
        # an input nested deeper than any real declaration, lock or record (a 100,000-deep JSON array)
        sys.stderr.write(f"execsys {args.command}: error: input nested too deeply to process\n")
        return ExitCode.USAGE
    except OSError as exc:
        if exc.errno not in _OUTPUT_ERRNOS or args.debug:
            if args.debug:
                raise
            return _internal_error(args.command, exc)
        _silence_stdout()
        where = f" ({exc.filename})" if exc.filename else ""
        sys.stderr.write(f"execsys {args.command}: error: cannot write{where}: {os.strerror(exc.errno).lower()}\n")
        return ExitCode.USAGE
    except Exception as exc:  # the last line of defence: no traceback without --debug
        if args.debug:
            raise
        return _internal_error(args.command, exc)


# A full disk (or quota) under stdout or a file being written: the user's environment, not a bug.
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def _silence_stdout() -> None:
    """Drop what is still buffered for stdout, so the interpreter's exit does not fail on it again."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115


def _internal_error(command: str, exc: BaseException) -> int:
    from execsys.redact import redact_text

    sys.stderr.write(
        f"execsys {command}: internal error: {type(exc).__name__}: {_one_line(redact_text(str(exc)))} "
        "(run again with --debug for the traceback, and please report it)\n"
    )
    return ExitCode.INTERNAL


def _one_line(text: str) -> str:
    return shown(" ".join(text.split())) or "unknown error"


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
