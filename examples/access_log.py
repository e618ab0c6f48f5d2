"""A web server's access log: requests per path, and server errors per path and hour.

Input: an access log in Common Log Format, a line per request, written when the response
is done (so a slow request is logged after faster later ones: up to a minute out of
order)::

    203.0.113.23 - - [20/Nov/2026:08:01:02 +0000] "GET /product/17 HTTP/1.1" 200 20604

One parsed stream, two branches and two sinks: every request counts in ``hits-per-path``;
the requests that failed on the server (status 5xx) count per path in one-hour windows
of the time they were logged, one final count per window in ``server-errors-per-hour``.

    rstreams run examples/access_log.py --input examples/data/access.log
"""

import re
from datetime import datetime, timedelta

from rstreams import StreamBuilder, TumblingWindow

LINE = re.compile(r'(?P<ip>\S+) \S+ \S+ \[(?P<time>[^]]+)\] "(?P<method>\S+) (?P<path>\S+)[^"]*" '
                  r"(?P<status>\d{3}) (?P<size>\d+|-)")  # fmt: skip


def parse(line: str) -> dict:
    m = LINE.match(line)
    if m is None:
        raise ValueError(f"not a Common Log Format line: {line!r}")
    when = datetime.strptime(m["time"], "%d/%b/%Y:%H:%M:%S %z")
    return {
        "ip": m["ip"],
        "method": m["method"],
        "path": m["path"],
        "status": int(m["status"]),
        "ts": int(when.timestamp() * 1000),
    }


def build() -> StreamBuilder:
    b = StreamBuilder("access-log")
    requests = b.source("access-log").map(parse).selectTimestamp(lambda r: r["ts"])
    # Branch 1: requests per path, all day.
    requests.keyBy(lambda r: r["path"]).count(name="hits").sink("hits-per-path")
    # Branch 2: server errors per path and hour, one result per hour once it is over.
    # Grace: lines are up to a minute out of order; 5 minutes lets every one count.
    (
        requests.filter(lambda r: r["status"] >= 500)
        .keyBy(lambda r: r["path"])
        .window(TumblingWindow(timedelta(hours=1), grace=timedelta(minutes=5)), emit="close")
        .count(name="server-errors")
        .sink("server-errors-per-hour")
    )
    return b
