"""Alert hooks: which callables hear of which events, per job (`@job(on=...)`) or for
every job (`@on_event(...)`). Pure bookkeeping: the delivery (once per fleet, retried,
with a timeout) is `scheduler.node.alerts`; the events are born in the store.

A hook is any callable taking one `Event`. Raising (or passing its timeout) counts as
a failed delivery, tried again later; it never touches a run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scheduler.errors import JobDefinitionError, UserError
from scheduler.model import Event
from scheduler.states import EventKind

Hook = Callable[[Event], Any]
# Hooks that fire for every job, registered by `on_event` as job modules are imported.
_GLOBAL: dict[EventKind, list[Hook]] = {}
KINDS = ", ".join(kind.value for kind in EventKind)


def kind_of(value: object) -> EventKind:
    """An event kind by its name; a UserError listing the kinds otherwise."""
    try:
        return EventKind(str(value).replace(" ", "_"))
    except ValueError:
        raise UserError(f"unknown event kind {value!r} (one of: {KINDS})") from None


def job_hooks(
    job: str, on: Mapping[str, Hook | Iterable[Hook]] | None
) -> dict[EventKind, tuple[Hook, ...]]:
    """`@job(on={"failed": notify, "missed": [a, b]})`, checked: a message naming the job
    and the field for an unknown kind, something not callable, or a hook's own problem."""
    if on is None:
        return {}
    if not isinstance(on, Mapping):
        raise JobDefinitionError(job, "on", "must map event kinds to hooks, e.g. {'failed': f}")
    found: dict[EventKind, tuple[Hook, ...]] = {}
    for name, value in on.items():
        try:
            kind = kind_of(name)
        except UserError as error:
            raise JobDefinitionError(job, "on", str(error)) from None
        listed = tuple(value) if isinstance(value, list | tuple) else (value,)
        for hook in listed:
            try:
                check_hook(hook)
            except UserError as error:
                raise JobDefinitionError(job, f"on[{name!r}]", str(error)) from None
        found[kind] = listed
    return found


def check_hook(hook: object) -> None:
    """Refuse what cannot be a hook, or a hook that says it is misconfigured (a webhook
    with a bad URL): `problem()` returns why."""
    if not callable(hook):
        raise UserError(f"{hook!r} is not callable")
    problem = getattr(hook, "problem", None)
    message = problem() if callable(problem) else None
    if message:
        raise UserError(str(message))


def on_event(*kinds: str) -> Callable[[Hook], Hook]:
    """Register a hook for every job: `@on_event("failed", "missed")` above a function
    taking an `Event`. With no kinds, every kind."""
    chosen = [kind_of(kind) for kind in kinds] or list(EventKind)

    def register(hook: Hook) -> Hook:
        try:
            check_hook(hook)
        except UserError as error:
            raise UserError(f"on_event({', '.join(map(repr, kinds))}): {error}") from None
        for kind in chosen:
            if hook not in _GLOBAL.setdefault(kind, []):
                _GLOBAL[kind].append(hook)
        return hook

    return register


def add_global(kind: EventKind, hook: Hook) -> None:
    """A hook for every job, added by code (the webhook from the environment)."""
    if hook not in _GLOBAL.setdefault(kind, []):
        _GLOBAL[kind].append(hook)


def clear_global() -> None:
    """Forget every global hook (tests)."""
    _GLOBAL.clear()


def hooks_for(
    job_hooks: Mapping[EventKind, tuple[Hook, ...]], kind: EventKind
) -> list[tuple[str, Hook]]:
    """The named hooks an event of this kind goes to: the job's, then the global ones."""
    chosen = [*job_hooks.get(kind, ()), *_GLOBAL.get(kind, [])]
    named: dict[str, Hook] = {}
    for hook in chosen:
        named.setdefault(name_of(hook), hook)
    return list(named.items())


def name_of(hook: Hook) -> str:
    """A stable name for a hook, the same on every node: what `delivered_to` records.
    Its `hook_name`, else its module and qualified name (two lambdas of one function
    share a name, and the second of them is dropped)."""
    explicit = getattr(hook, "hook_name", None)
    if isinstance(explicit, str):
        return explicit
    module = getattr(hook, "__module__", None) or type(hook).__module__
    qualname = getattr(hook, "__qualname__", None) or type(hook).__qualname__
    return f"{module}.{qualname}"


def max_tries(hooks: Iterable[Hook], default: int) -> int:
    """How many delivery tries an event gets: the most its hooks ask for, each its own
    `max_tries` (a webhook's retries plus one) or the default."""
    asked = [getattr(hook, "max_tries", None) for hook in hooks]
    return max([n if isinstance(n, int) else default for n in asked] or [default])
