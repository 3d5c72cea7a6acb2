"""The error queue as one model (docs/console.md, docs/operations.md): `ErrorQueue` reads its groups,
pages and messages and takes its actions (retry, archive, restore, purge, edit and retry), each
chosen by a `Selection`. The console's routes and the command line call it; the headers are read by
`wire` alone, the statements are the engine's (`dialect.live_bus`)."""

from .log import ActionLog, NoActionLog
from .model import EDIT_OF, Edit, ErrorQueue
from .moves import Archive, Archived, Moved, NoArchive
from .reading import GROUP_SORTS, MAX_PAGE, PAGE_SIZE, PAGE_SORTS, TOTAL_CAP, Group, Message, Page, as_time, body_text, history, sort_of
from .retrying import (
    LEFT_ERROR_QUEUE,
    LEFT_MISSING,
    LEFT_NO_FAILED_Q,
    LEFT_NOT_AN_ADDRESS,
    LEFT_UNKNOWN,
    LEFT_UNREADABLE,
    RetryOptions,
    RetryReport,
    retry,
)
from .selection import FIELDS, FILTER_FIELDS, GROUPINGS, Selection, like_pattern, read_value

__all__ = [
    "ErrorQueue",
    "Selection",
    "Edit",
    "EDIT_OF",
    "Group",
    "Page",
    "Message",
    "RetryReport",
    "RetryOptions",
    "retry",
    "LEFT_NO_FAILED_Q",
    "LEFT_UNREADABLE",
    "LEFT_NOT_AN_ADDRESS",
    "LEFT_UNKNOWN",
    "LEFT_MISSING",
    "LEFT_ERROR_QUEUE",
    "ActionLog",
    "NoActionLog",
    "Archive",
    "Archived",
    "Moved",
    "NoArchive",
    "GROUPINGS",
    "FIELDS",
    "FILTER_FIELDS",
    "GROUP_SORTS",
    "PAGE_SORTS",
    "PAGE_SIZE",
    "MAX_PAGE",
    "TOTAL_CAP",
    "body_text",
    "as_time",
    "history",
    "sort_of",
    "like_pattern",
    "read_value",
]
