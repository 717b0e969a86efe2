"""Options between runs of one durable crawl: which a later run takes from the crawl.

A crawl kept in a state file or on a shared frontier's server outlives the run that made
it. The options that say *what* to crawl (declared ``fixed``) are the crawl's: a later run,
or a process that joins, may leave them out and gets the stored values, but may not give
others (:class:`OptionChanged`). The options that say *how* to crawl are each run's own.
This module is that rule, over the declarations of :class:`~trio_crawler._config.CrawlOptions`;
where a store keeps the options is the store's business (:mod:`trio_crawler._stores`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._config import CrawlOptions
from ._options import ConfigError, declared_options

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping


class OptionChanged(ConfigError):
    """A later run of a durable crawl gives an option that says what to crawl (one
    declared ``fixed``) another value than the run that made the crawl.

    Attributes:
        given: The value this run gives.
        stored: The value the crawl was made with.
        where: Where the crawl is kept (the state file's path), for the message.
    """

    def __init__(self, option: str, *, given: object, stored: object, where: str) -> None:
        super().__init__(
            option,
            f"is {given!r}, but the crawl in {where} was made with {stored!r}: what to crawl "
            f"is fixed by the run that made the crawl (leave {option} out to keep {stored!r}, "
            "or start a new crawl)",
        )
        self.given = given
        self.stored = stored
        self.where = where


def keep_what_to_crawl(
    given: Mapping[str, Any],
    stored: Mapping[str, Any],
    *,
    where: str,
    also: Collection[str] = (),
    damaged: str = "state",
) -> dict[str, Any]:
    """The options of a later run of a durable crawl: those ``given`` to this run, and for
    each option that says what to crawl (declared ``fixed``), or is named in ``also``, and
    is not given, the value the crawl was made with (``stored``). ``damaged`` is the option
    a damaged stored value is reported under (the store's).

    The options that say *how* to crawl (``max_tasks``, ``delay``, ``timeout``...) are each
    run's own: given or not, the stored ones are not used. A stored option that is
    missing (a file from an older version, or edited) is left to its default.

    Raises:
        OptionChanged: A ``fixed`` option is given with another value than the stored one.
        ConfigError: A stored value is no value of its option (the file was damaged); the
            message names ``where``.
    """
    options = dict(given)
    for declared, spec in declared_options(CrawlOptions):
        name = declared.name
        if not (spec.fixed or name in also) or name not in stored:
            continue
        kept = stored[name]
        if kept is not None or declared.default is not None:
            try:
                kept = kept if spec.check is None else spec.check(name, kept)
            except ConfigError as exc:
                problem = f"{where}: its crawl was made with {exc}; it is damaged"
                raise ConfigError(damaged, problem) from None
        if name not in given:
            options[name] = kept
            continue
        value = given[name]
        try:
            value = value if spec.check is None or value is None else spec.check(name, value)
        except ConfigError:
            continue  # the given value is unusable: CrawlOptions says so, in its own words
        if value != kept:
            raise OptionChanged(name, given=value, stored=kept, where=where)
    return options
