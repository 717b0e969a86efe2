"""How an option is declared and checked: the machinery both option tables are made with.

Theory of operation
-------------------
An option is one field of a frozen dataclass: its name, type and default are the field's,
and an :class:`Option` in the field's metadata (made by :func:`option`) holds the rest: its
help text, the check its value must pass, and how the command line spells it. Two tables
are declared this way: the crawl's options (:class:`~trio_crawler._config.CrawlOptions`,
what a ``Crawler`` takes) and the command line's own
(:class:`~trio_crawler._cli_args.CommandLine`: ``--demo``, ``--grace``, ``-o``...). What
is made from a table is made here, the same way for both:

* validation: :func:`check_options` runs each field's check when the dataclass is made,
  and a check raises :class:`ConfigError` naming the option by its Python name;
* keyword arguments: :func:`takes_options` gives a function that takes ``**options`` the
  signature and documentation of a table's options, and :func:`reject_unknown_options`
  Python's own error for a keyword that is none of them;
* the command line: ``_cli_args.build_parser`` reads each :class:`Option`'s flags,
  metavar and ``--help`` section (:data:`SECTIONS`).

This module knows no option by name, and is apart from :mod:`trio_crawler._config` (the
crawl's table, its defaults and the config the core reads) because it changes for another
reason: a new option is a row there and never a change here, while a change here (a new
attribute of an option, a new kind of check) changes how every row of both tables is read.
The checks here are the generic ones (a whole number, seconds, a truth value); a check that
knows what one option means (a regular expression, a Redis URL) is
:mod:`trio_crawler._option_checks`'.
"""

from __future__ import annotations

import inspect
import math
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import Field, dataclass, field, fields
from typing import Any, Final, TypeVar

# The help sections of the command line, in the order ``--help`` shows them.
WHAT = "what to crawl"
LIMITS = "limits"
MANNERS = "manners"
DURABLE = "crawls that outlive one process"
OUTPUT = "output"
SECTIONS = (WHAT, LIMITS, MANNERS, DURABLE, OUTPUT)


class ConfigError(ValueError):
    """An option has a value the crawler cannot use.

    Attributes:
        option: The option's Python name (``max_tasks``).
        problem: What is wrong and, where there is one, the fix; it reads after the option name.
        mentions: Other options the problem names, each written ``{name}`` in it, so that
            the command line can spell them as flags (:meth:`problem_as`): "recrawl needs
            state" in Python is "--recrawl needs --state" there.
    """

    def __init__(self, option: str, problem: str, *, mentions: tuple[str, ...] = ()) -> None:
        self.option = option
        self.mentions = mentions
        self._problem = problem
        self.problem = self.problem_as(lambda name: name)
        super().__init__(f"{option} {self.problem}")

    def problem_as(self, spell: Callable[[str], str]) -> str:
        """The problem, with the options it mentions spelt by ``spell``."""
        if not self.mentions:
            return self._problem
        return self._problem.format_map({name: spell(name) for name in self.mentions})


# A check takes the option's name and a value; it returns the value as the crawl keeps it
# (a float for seconds given as an int) or raises ConfigError(name, problem).
Check = Callable[[str, Any], Any]


class _Same:
    """The command line's default is the API's (the usual case); see Option.cli_default."""

    def __repr__(self) -> str:
        return "SAME"


SAME: Final = _Same()


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """What an option is besides its name, type and default (those are its field's).

    Attributes:
        help: One line for ``--help`` and the ``Crawler`` docs. A default that is not None
            is added to it; say in it what None means.
        check: Validates (and normalises) a value; None accepts any value of the type. A
            value of None is accepted, unchecked, exactly when the default is None.
        flags: The command-line spellings, the first one used in messages. An option that
            is not a boolean takes a value (``--max-tasks N``); a boolean's flags set it True.
        off_flags: A boolean's flags that set it False (``--lenient``, ``--ignore-robots``).
        off_help: The help of ``off_flags``.
        metavar: The value's name in ``--help`` (``N``, ``SECONDS``).
        cli_default: The default on the command line when it is not the API's.
        section: The ``--help`` section the flags are listed in (one of SECTIONS).
        chapter: The chapter's ``Crawler`` took this keyword; it comes first in the signature.
        counted: An int flag that counts its repeats (``-vv``) instead of taking a value.
        repeated: A flag given once per value (``--include A --include B``): the values
            reach the check as a list, in the order given.
        fixed: The option says *what* to crawl, not how: a durable crawl keeps the value
            the run that made it had, and a later run may leave it out but not change it
            (see :func:`~trio_crawler._between_runs.keep_what_to_crawl`).
    """

    help: str
    check: Check | None = None
    flags: tuple[str, ...] = ()
    off_flags: tuple[str, ...] = ()
    off_help: str = ""
    metavar: str | None = None
    cli_default: object = SAME
    section: str = WHAT
    chapter: bool = False
    counted: bool = False
    repeated: bool = False
    fixed: bool = False


_OPTION = "trio_crawler.option"  # the metadata key an Option is stored under

_T = TypeVar("_T")


def option(
    default: _T,
    *,
    help: str,
    check: Check | None = None,
    flags: tuple[str, ...] = (),
    off_flags: tuple[str, ...] = (),
    off_help: str = "",
    metavar: str | None = None,
    cli_default: object = SAME,
    section: str = WHAT,
    chapter: bool = False,
    counted: bool = False,
    repeated: bool = False,
    fixed: bool = False,
    secret: bool = False,
) -> _T:
    """Declare an option: a dataclass field with ``default`` and an :class:`Option`."""
    declared = Option(
        help=help,
        check=check,
        flags=flags,
        off_flags=off_flags,
        off_help=off_help,
        metavar=metavar,
        cli_default=cli_default,
        section=section,
        chapter=chapter,
        counted=counted,
        repeated=repeated,
        fixed=fixed,
    )
    # A secret's value (it may hold a password) is left out of the dataclass's repr.
    return field(default=default, metadata={_OPTION: declared}, repr=not secret)


def declared_options(cls: type[Any]) -> list[tuple[Field[Any], Option]]:
    """The option fields of a dataclass, in declaration order, each with its Option."""
    return [(f, f.metadata[_OPTION]) for f in fields(cls) if _OPTION in f.metadata]


def check_options(instance: object) -> None:
    """Run every option's check on a just-made dataclass, keeping the normalised values.

    Meant for ``__post_init__``; fields are checked in declaration order, so the first
    unusable one is the one reported.
    """
    for declared, spec in declared_options(type(instance)):
        value = getattr(instance, declared.name)
        if spec.check is None or (value is None and declared.default is None):
            continue
        checked = spec.check(declared.name, value)
        if checked is not value:
            object.__setattr__(instance, declared.name, checked)  # frozen: set once, here


# The checks. Each message reads after the option's name, in the API ("max_tasks must be
# >= 1, not 0") and on the command line ("--max-tasks must be >= 1, not 0").


def whole_number(*, minimum: int) -> Check:
    """A check for an int of at least ``minimum`` (a bool is not a number here)."""

    def check(name: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(name, f"must be a whole number, not {value!r}")
        if value < minimum:
            raise ConfigError(name, f"must be >= {minimum}, not {value!r}")
        return value

    return check


def seconds(name: str, value: object) -> float:
    """A positive, finite number of seconds, kept as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(name, f"must be a number of seconds, not {value!r}")
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(name, f"must be a positive number of seconds, not {value!r}")
    return float(value)


def truth(name: str, value: object) -> bool:
    """Any value, kept as its truth (as ``if strict:`` would read it)."""
    return bool(value)


def reject_unknown_options(table: type[Any], options: Iterable[str], *, function: str) -> None:
    """Raise Python's own TypeError for a keyword that is no option of ``table``.

    A function taking ``**options`` would otherwise pass a misspelling on to be reported
    under another function's name; this names ``function``, as if every option were in its
    signature.
    """
    known = {f.name for f, _ in declared_options(table)}
    for name in options:
        if name not in known:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")


_Function = TypeVar("_Function", bound=Callable[..., object])


def takes_options(table: type[Any]) -> Callable[[_Function], _Function]:
    """Show a function's ``**options`` as the options of ``table`` (a dataclass of declared
    options), in its signature and docs.

    ``inspect.signature`` and ``help()`` then read as if every option were spelt out:
    after the positional parameters come the chapter's options; then the function's first
    keyword-only parameter, where the chapter's ``Crawler`` had its ``loop``; then the other
    options; then the function's remaining keyword-only parameters. The docstring gets an
    "Options" section made of the options' help.
    """

    def show_options(function: _Function) -> _Function:
        signature = inspect.signature(function)
        own = list(signature.parameters.values())
        if not own or own[-1].kind is not inspect.Parameter.VAR_KEYWORD:
            raise TypeError(f"{function.__qualname__} must take **options")
        own.pop()
        positional = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        keyword = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
        declared = declared_options(table)

        def parameters(chapter: bool) -> list[inspect.Parameter]:
            return [
                inspect.Parameter(
                    f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type
                )
                for f, spec in declared
                if spec.chapter is chapter
            ]

        ordered = [*positional, *parameters(True), *keyword[:1], *parameters(False), *keyword[1:]]
        function.__signature__ = signature.replace(parameters=ordered)  # type: ignore[attr-defined]
        lines = [
            inspect.cleandoc(function.__doc__ or ""),
            "",
            f"Options (see :class:`{table.__name__}`):",
        ]
        for f, spec in declared:
            text = spec.help
            for other, other_spec in declared:  # "--max-tasks" reads "max_tasks" here
                for flag in other_spec.flags:
                    text = text.replace(flag, other.name)
            if spec.off_help:
                text = f"{text}; if False, {spec.off_help}"
            shown = "" if f.default is None else f" (default {f.default!r})"
            entry = f"{f.name}: {text}{shown}."
            lines.append(
                textwrap.fill(entry, 88, initial_indent="    ", subsequent_indent="        ")
            )
        function.__doc__ = "\n".join(lines).strip()
        return function

    return show_options
