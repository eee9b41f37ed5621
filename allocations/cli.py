"""`fatia`: the command-line client of the Fatia portal's REST API (/api/v1/).

Standard library only, so it runs on any machine with Python 3.11, with or without the portal
installed: no Django import here or in anything it imports.

    fatia login --url https://fatia.example.org --token fatia_<prefix>_<secret>
    fatia request --pool h100 --profile 1g.10gb --count 2 --lease-hours 8 --purpose "fine-tune"
    fatia list --status pending --status approved
    fatia --json show 12 | jq .status
    fatia book create --pool h100 --profile 1g.10gb --count 4 --start 2026-12-03T09:00 --end 2026-12-03T17:00 \
        --purpose "workshop"
    fatia queue --mine

Where the server and token come from, first match wins: --url/--token, then FATIA_URL/FATIA_TOKEN,
then the config file that `fatia login` writes ($FATIA_CONFIG or ~/.config/fatia/config.json,
mode 0600).

Exit codes: 0 success; 1 the API refused (the message is on stderr, one line); 2 usage error or
not logged in; 3 the server could not be reached or did not answer in time.
"""

from __future__ import annotations

import argparse
import getpass
import http.client
import json
import os
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

VERSION = "0.1.0"
API_PREFIX = "/api/v1"
DEFAULT_TIMEOUT_S = 30.0
# Safe calls (GETs, and creates that carry an Idempotency-Key) are retried this many times after a
# dropped connection or a 502/503/504, as happens while the portal restarts.
RETRIES = 2
RETRY_BACKOFF_S = 0.5
TRANSIENT_STATUSES = (502, 503, 504)

EXIT_OK = 0
EXIT_API_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

JsonObject = dict[str, Any]


# --- errors ----------------------------------------------------------------------------------------


class CliError(Exception):
    """A failure reported as one line on stderr; `exit_code` says which kind."""

    exit_code = EXIT_API_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ApiError(CliError):
    """The server answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{message} (HTTP {status})")
        self.status = status
        self.reason = message


class Unreachable(CliError):
    exit_code = EXIT_UNREACHABLE


class ConfigError(CliError):
    exit_code = EXIT_USAGE


def error_message(status: int, body: Any) -> str:
    """One line from an API error body: {"code", "errors": {field: [msgs]}, "detail"} or {"detail"}."""
    if isinstance(body, dict):
        errors = body.get("errors")
        if isinstance(errors, dict) and errors:
            parts = []
            for field, messages in errors.items():
                text = "; ".join(str(m) for m in messages) if isinstance(messages, list) else str(messages)
                parts.append(text if field in ("detail", "non_field_errors") else f"{field}: {text}")
            return "; ".join(parts)
        detail = body.get("detail")
        if detail:
            return str(detail)
    reason = http.client.responses.get(status, "error")
    return f"The server answered {reason}."


# --- configuration ---------------------------------------------------------------------------------


def config_path() -> Path:
    override = os.environ.get("FATIA_CONFIG")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "fatia" / "config.json"


def read_config(path: Path) -> dict[str, str]:
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"Cannot read {path}: {exc.strerror}.") from exc
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON; run `fatia login` again.") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a JSON object; run `fatia login` again.")
    return {str(k): str(v) for k, v in data.items() if isinstance(v, str)}


def write_config(path: Path, data: dict[str, str]) -> None:
    """Write atomically with mode 0600 from the start: the file holds a secret."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".json", dir=path.parent)  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def normalize_url(url: str) -> str:
    """`https://host/` and `https://host/api/v1` both mean the portal at https://host."""
    url = url.strip().rstrip("/")
    if url.endswith(API_PREFIX):
        url = url[: -len(API_PREFIX)]
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"{url!r} is not an http(s) URL, e.g. https://fatia.example.org.")
    return url


# --- HTTP ------------------------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow redirects: urllib would replay the Authorization header to wherever they point."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


class Api:
    """A thin JSON client: every call has a timeout, errors become CliError subclasses."""

    def __init__(self, url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.url = url
        self.token = token
        self.timeout = timeout
        self.last_status = 0
        self._opener = urllib.request.build_opener(_NoRedirect())

    def get(self, path: str, params: Sequence[tuple[str, str]] = ()) -> Any:
        return self.call("GET", path, params=params, retry=True)

    def post(self, path: str, body: JsonObject | None = None, *, headers: dict[str, str] | None = None) -> Any:
        retry = bool(headers and "Idempotency-Key" in headers)
        return self.call("POST", path, body=body, headers=headers, retry=retry)

    def delete(self, path: str) -> Any:
        return self.call("DELETE", path)

    def patch(self, path: str, body: JsonObject) -> Any:
        return self.call("PATCH", path, body=body)

    def get_all(self, path: str, params: Sequence[tuple[str, str]] = ()) -> list[Any]:
        """Every result of a paginated list, following `next` page by page."""
        results: list[Any] = []
        query = list(params)
        while True:
            page = self.get(path, query)
            if not isinstance(page, dict):  # an unpaginated list
                return list(page)
            results.extend(page.get("results", []))
            next_url = page.get("next")
            if not next_url:
                return results
            # Follow the page number, not the absolute link: behind a proxy its host may not be ours.
            query = urllib.parse.parse_qsl(urllib.parse.urlsplit(str(next_url)).query)

    def call(
        self,
        method: str,
        path: str,
        *,
        params: Sequence[tuple[str, str]] = (),
        body: JsonObject | None = None,
        headers: dict[str, str] | None = None,
        retry: bool = False,
    ) -> Any:
        self.last_status = 0
        attempts = 1 + (RETRIES if retry else 0)
        for attempt in range(1, attempts + 1):
            try:
                return self._once(method, path, params=params, body=body, headers=headers or {})
            except (ApiError, Unreachable) as exc:
                transient = isinstance(exc, ApiError) and exc.status in TRANSIENT_STATUSES
                transient = transient or (isinstance(exc, Unreachable) and exc.__cause__ is not None and _dropped(exc))
                if attempt == attempts or not transient:
                    raise
                time.sleep(RETRY_BACKOFF_S * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _once(
        self,
        method: str,
        path: str,
        *,
        params: Sequence[tuple[str, str]],
        body: JsonObject | None,
        headers: dict[str, str],
    ) -> Any:
        url = f"{self.url}{API_PREFIX}{path}"
        if params:
            url = f"{url}?{urllib.parse.urlencode(params)}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (scheme checked in normalize_url)
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", f"fatia-cli/{VERSION}")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in headers.items():
            request.add_header(name, value)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                self.last_status = response.status
                return _decode(response.read(), response.status)
        except urllib.error.HTTPError as exc:
            with exc:
                raw = exc.read()
            if 300 <= exc.code < 400:
                where = exc.headers.get("Location", "elsewhere")
                raise ApiError(exc.code, f"The server redirects to {where}; log in with that URL.") from None
            try:
                payload = json.loads(raw) if raw else None
            except ValueError:
                payload = None
            message = error_message(exc.code, payload)
            if exc.code == 401:
                message = f"{message.rstrip('.')}; run `fatia login` with a valid token."
            raise ApiError(exc.code, message) from None
        except urllib.error.URLError as exc:
            raise Unreachable(f"Cannot reach {self.url}: {_reason(exc.reason)}.") from exc
        except TimeoutError as exc:
            raise Unreachable(f"{self.url} did not answer within {self.timeout:g} s.") from exc
        except (http.client.HTTPException, ConnectionError) as exc:
            raise Unreachable(f"The connection to {self.url} broke: {_reason(exc)}.") from exc


def _decode(raw: bytes, status: int) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise ApiError(
            status, "The server answered with something that is not JSON; is the URL the portal's?"
        ) from None


def _reason(reason: object) -> str:
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    if isinstance(reason, TimeoutError):
        return "timed out"
    return str(reason) or type(reason).__name__


def _dropped(exc: CliError) -> bool:
    """A connection the server dropped (restarting): worth one more try; refused or timed out: not."""
    cause = exc.__cause__
    if isinstance(cause, urllib.error.URLError):
        cause = cause.reason if isinstance(cause.reason, BaseException) else None
    return isinstance(cause, ConnectionResetError | ConnectionAbortedError | http.client.RemoteDisconnected)


# --- output ----------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A compact aligned table: two spaces between columns, no borders."""
    cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _cell(value: object) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def when(value: object) -> str:
    """ISO timestamps from the API, shortened to minutes in UTC: 2026-11-30 14:05Z."""
    if not value:
        return "-"
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%MZ") if moment.utcoffset() is not None else str(value)


def fields(pairs: Sequence[tuple[str, object]]) -> str:
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"  {k.ljust(width)}  {_cell(v)}" for k, v in pairs)


def size_of(a: JsonObject) -> str:
    """One slice's profile, or one share's memory (and MPS thread share) in time-sliced and MPS pools."""
    if a.get("memory_mib") is None:
        return str(a["profile"])
    threads = f", {a['thread_percentage']} % threads" if a.get("thread_percentage") is not None else ""
    return f"{a['memory_mib']} MiB share{threads}"


def headline(a: JsonObject) -> str:
    return (
        f"Allocation #{a['id']}: {a['status']} - {a['count']}x {size_of(a)} in {a['pool_name']} "
        f"for {a['tenant_name']}, {a['lease_hours']} h lease"
    )


def describe_allocation(a: JsonObject, *, full: bool) -> str:
    lines = [headline(a)]
    if a.get("status_message"):
        lines.append(f"  {a['status_message']}")
    if not full:
        return "\n".join(lines)
    cost = f"{a['compute_slices']} compute / {a['memory_slices']} memory slices = {_cell(a['gpu_equivalents'])} GPU-eq"
    if a.get("memory_mib") is not None:
        cost = f"{a['compute_slices']} % of a GPU / {a['memory_slices']} GiB = {_cell(a['gpu_equivalents'])} GPU-eq"
    pairs: list[tuple[str, object]] = [
        ("tenant", f"{a['tenant_name']} ({a['tenant']})"),
        ("pool", f"{a['pool_name']} ({a['pool']})"),
        ("requested by", f"{a['requested_by']}, {when(a['created_at'])}"),
        ("purpose", a["purpose"]),
        ("cost", cost),
        *([("isolation", a["isolation_warning"])] if a.get("isolation_warning") else []),
        ("auto-approved", "yes" if a.get("auto_approved") else "no"),
        ("decided", when(a.get("decided_at"))),
        ("reason", a.get("decision_reason")),
        _claim_pair(a),
        ("namespace", a.get("namespace")),
        ("active since", when(a.get("activated_at"))),
        ("lease expires", when(a.get("lease_expires_at"))),
        *_borrowed_pairs(a),
        *_hold_pairs(a),
        ("ended", when(a.get("ended_at"))),
    ]
    lines.append(fields(pairs))
    placements = a.get("placements") or []
    if placements:
        lines += ["", "Placements:"]
        if a.get("memory_mib") is not None:
            shares = [(p["node"], p["gpu_index"], p.get("memory_mib"), p["device_name"]) for p in placements]
            lines.append(table(["NODE", "GPU", "MIB", "DEVICE"], shares))
        else:
            slots = [
                (p["node"], p["gpu_index"], p["profile"], p["start"], p["size"], p["device_name"]) for p in placements
            ]
            lines.append(table(["NODE", "GPU", "PROFILE", "START", "SIZE", "DEVICE"], slots))
    timeline = a.get("timeline") or []
    if timeline:
        lines += ["", "Timeline:"]
        events = [(when(e["created_at"]), e["actor_name"], e["verb"], _status_change(e)) for e in timeline]
        lines.append(table(["WHEN", "ACTOR", "VERB", "CHANGE"], events))
    return "\n".join(lines)


def _status_change(event: JsonObject) -> str:
    before = (event.get("before") or {}).get("status")
    after = (event.get("after") or {}).get("status")
    if before and after:
        return f"{before} -> {after}"
    return str(after or before or "")


def emit(out: Output, data: Any, human: Callable[[], str]) -> None:
    if out.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(human())


class Output:
    def __init__(self, *, json_output: bool) -> None:
        self.json = json_output


# --- commands --------------------------------------------------------------------------------------


Handler = Callable[[argparse.Namespace, Output], int]


def cmd_login(args: argparse.Namespace, out: Output) -> int:
    url = normalize_url(args.url or os.environ.get("FATIA_URL") or _prompt("Portal URL: "))
    token = args.token or os.environ.get("FATIA_TOKEN") or _read_secret("API token: ")
    if not token:
        raise ConfigError("No token given: pass --token, set FATIA_TOKEN, or paste it when asked.")
    me = Api(url, token, timeout=timeout_of(args)).get("/me/")
    path = config_path()
    write_config(path, {"url": url, "token": token})
    emit(out, me, lambda: f"Logged in to {url} as {me['username']}. Saved to {path}.")
    return EXIT_OK


def cmd_logout(args: argparse.Namespace, out: Output) -> int:
    path = config_path()
    existed = path.exists()
    path.unlink(missing_ok=True)
    message = (
        f"Logged out: removed {path}. The token itself still works until you revoke it (fatia token revoke)."
        if existed
        else f"Not logged in ({path} does not exist)."
    )
    emit(out, {"logged_out": existed, "config": str(path)}, lambda: message)
    return EXIT_OK


def cmd_whoami(args: argparse.Namespace, out: Output) -> int:
    api = client(args)
    me = api.get("/me/")
    if out.json:
        print(json.dumps(me, indent=2, sort_keys=True))
        return EXIT_OK
    tenants = {t["id"]: t for t in api.get_all("/tenants/")}
    role = " (platform admin)" if me.get("is_platform_admin") else ""
    lines = [f"{me['username']}{role} at {api.url}"]
    memberships = me.get("memberships") or []
    # The slug and the id: each --tenant takes either.
    if memberships:
        rows = [
            (tenants.get(m["tenant"], {}).get("name", "?"), tenants.get(m["tenant"], {}).get("slug", "?"), m["tenant"],
             m["role"])
            for m in memberships
        ]  # fmt: skip
        lines.append(table(["TENANT", "SLUG", "ID", "ROLE"], rows))
    else:
        lines.append("No tenant memberships.")
    if me.get("is_platform_admin") and tenants:
        lines.append("Every tenant (you manage them all as a platform admin):")
        lines.append(table(["TENANT", "SLUG", "ID"], [(t["name"], t["slug"], t["id"]) for t in tenants.values()]))
    print("\n".join(lines))
    return EXIT_OK


def cmd_pools(args: argparse.Namespace, out: Output) -> int:
    pools = client(args).get_all("/pools/")

    def human() -> str:
        if not pools:
            return "No pools."
        blocks = []
        for p in pools:
            header = f"{p['slug']} (id {p['id']}): {p['name']}, {p['gpu_model']}"
            if p.get("kind", "mig") != "mig":
                kind = "time-sliced" if p["kind"] == "shared" else "MPS"
                memory = p.get("gpu_memory_mib")
                blocks.append(
                    f"{header}\n  {kind}: shares of whole GPUs by memory ({memory} MiB per GPU); "
                    f"ask with --memory-mib{' and --threads' if p['kind'] == 'mps' else ''}.\n"
                    f"  Isolation: {p.get('isolation', '')}"
                )
                continue
            if p.get("admission") == "hold":  # issue 14: why a request that fits may wait
                header += (
                    f"\n  Holds a request that would strand room for larger ones, at most {p['max_hold_minutes']} min, "
                    "then places it wherever it fits (while the pool first fills, also one that would open an "
                    "empty GPU kept for whole-GPU requests)."
                )
            rows = [
                (c["name"], c["compute_slices"], c["memory_slices"], c["memory_mib"], c["max_count"])
                for c in p.get("profile_catalog") or []
            ]
            blocks.append(header + "\n" + table(["PROFILE", "COMPUTE", "MEMORY", "MIB", "PER GPU"], rows))
        return "\n\n".join(blocks)

    emit(out, pools, human)
    return EXIT_OK


def cmd_quota(args: argparse.Namespace, out: Output) -> int:
    api = client(args)
    params = [("tenant", str(resolve_tenant(api, args.tenant)))] if args.tenant is not None else []
    balances = api.get_all("/quotas/", params)

    def human() -> str:
        if not balances:
            return "No quotas."
        rows = [
            (
                b["tenant_name"],
                b["pool_name"],
                f"{b['compute_slices_used']}/{b['compute_slices_limit']}",
                f"{b['memory_slices_used']}/{b['memory_slices_limit']}",
                f"{_cell(b['gpu_equivalents_used'])}/{_cell(b['gpu_equivalents_limit'])}",
                _cell(b["gpu_equivalents_free"]),
                ", ".join(f"{k}<={v}" for k, v in sorted((b.get("profile_caps") or {}).items())),
            )
            for b in balances
        ]
        return table(["TENANT", "POOL", "COMPUTE", "MEMORY", "GPU-EQ", "GPU-EQ FREE", "CAPS"], rows)

    emit(out, balances, human)
    return EXIT_OK


def resolve_pool(api: Api, pool: str) -> int:
    if pool.isascii() and pool.isdigit():  # not isdigit alone: it takes "²", which int() refuses
        return int(pool)
    found = api.get("/pools/", [("slug", pool)])
    results = found.get("results", []) if isinstance(found, dict) else found
    if not results:
        raise CliError(f"No pool with slug {pool!r}; `fatia pools` lists them.")
    return int(results[0]["id"])


def resolve_tenant(api: Api, tenant: str) -> int:
    """A tenant's id from its id or slug, as resolve_pool does for pools (admins see slugs on the pages, not ids)."""
    text = tenant.strip()
    if text.isascii() and text.isdigit() and int(text) >= 1:
        return int(text)
    found = api.get("/tenants/", [("slug", text)]) if text else []
    results = found.get("results", []) if isinstance(found, dict) else found
    if not results:
        raise CliError(f"No tenant with slug or id {text!r} that you can see; `fatia whoami` lists your tenants.")
    return int(results[0]["id"])


def cmd_request(args: argparse.Namespace, out: Output) -> int:
    api = client(args)
    body: JsonObject = {
        "pool": resolve_pool(api, args.pool),
        "count": args.count,
        "lease_hours": args.lease_hours,
        "purpose": args.purpose,
    }
    # MIG pools take a profile; time-sliced and MPS pools a memory size per share (and MPS a thread share).
    # The portal says which is missing or wrong (400 with field messages), so the CLI passes what it was given.
    if args.profile is not None:
        body["profile"] = args.profile
    if args.memory_mib is not None:
        body["memory_mib"] = args.memory_mib
    if args.threads is not None:
        body["thread_percentage"] = args.threads
    if args.movable is not None:
        body["movable"] = args.movable
    if args.tenant is not None:
        body["tenant"] = resolve_tenant(api, args.tenant)
    if args.namespace is not None:
        body["namespace"] = args.namespace
    key = args.idempotency_key or str(uuid.uuid4())
    try:
        allocation = api.post("/allocations/", body, headers={"Idempotency-Key": key})
    except Unreachable as exc:
        raise Unreachable(
            f"{exc.message} The request may or may not have been created: "
            f"repeat it with --idempotency-key {key} to be safe."
        ) from exc
    replayed = api.last_status == 200

    def human() -> str:
        text = describe_allocation(allocation, full=False) + "\n" + claim_hint(allocation)
        if replayed:
            text += f"\n  (Idempotency-Key {key} was used before: this is that earlier request.)"
        return text

    emit(out, allocation, human)
    return EXIT_OK


def _claim_names(a: JsonObject) -> list[str]:
    """The request's claims: the API's claim_names (detail answers), else the one claim_name."""
    names = a.get("claim_names")
    if isinstance(names, list) and names:
        return [str(n) for n in names]
    return [str(a["claim_name"])] if a.get("claim_name") else []


def _claim_pair(a: JsonObject) -> tuple[str, object]:
    names = _claim_names(a)
    return ("claims", ", ".join(names)) if len(names) > 1 else ("claim", a.get("claim_name"))


def claim_hint(a: JsonObject) -> str:
    """Where the slices are once active: the claim(s) and namespace, or how to find them out later."""
    names = _claim_names(a)
    if a.get("status") == "active" and len(names) > 1:
        listed = ", ".join(names)
        return (
            f"  Claims {listed} in namespace {a.get('namespace') or '-'}: run your pod in that namespace with one "
            f"spec.resourceClaims[] entry per claim, resourceClaimName: {listed}"
        )
    if a.get("status") == "active" and a.get("claim_name"):
        return (
            f"  Claim {a['claim_name']} in namespace {a.get('namespace') or '-'}: run your pod in that namespace "
            f"with spec.resourceClaims[].resourceClaimName: {a['claim_name']}"
        )
    if a.get("status") == "queued":
        return "  It waits in the pool's queue; `fatia queue --mine` shows its position and estimated start."
    if a.get("status") in ("pending", "approved", "provisioning"):
        return f"  Once it is active, `fatia show {a['id']}` prints the claim name and namespace for your pod spec."
    return "  It has no claim to use."


BORROWED_NOTE = "borrowed: runs on slices borrowed from the cohort, which may be reclaimed (after notice)."


def _status_cell(a: JsonObject) -> str:
    """The status, marked when the request runs on borrowed slices (issue 15), with the reclaim deadline if any."""
    if not a.get("is_borrowed"):
        return str(a["status"])
    reclaim = f", reclaim at {when(a['reclaim_at'])}" if a.get("reclaim_at") else ""
    return f"{a['status']} (borrowed{reclaim})"


def _borrowed_pairs(a: JsonObject) -> list[tuple[str, object]]:
    if not a.get("is_borrowed"):
        return []
    part = f"{a.get('borrowed_compute_slices', 0)} compute / {a.get('borrowed_memory_slices', 0)} memory slices"
    pairs: list[tuple[str, object]] = [("borrowed", f"{part} from the cohort, may be reclaimed")]
    if a.get("reclaim_at"):
        pairs.append(("reclaim at", when(a["reclaim_at"])))
    return pairs


# How a request's hold ended (issue 14), as its page says it (allocations/admission/outcome_text.py).
_HOLD_ENDS = {"placed": "placed after a release", "forced": "placed at the deadline", "lost": "then it no longer fit"}


def _hold_pairs(a: JsonObject) -> list[tuple[str, object]]:
    """One "hold" line once its hold ended: how long (from its first `hold` event in the timeline), how, when."""
    outcome, ended = a.get("hold_outcome"), a.get("hold_ended_at")
    if not outcome or not ended:
        return []
    began = next((e["created_at"] for e in a.get("timeline") or [] if e.get("verb") == "hold"), None)
    held = "held"
    if began:
        seconds = (datetime.fromisoformat(str(ended)) - datetime.fromisoformat(str(began))).total_seconds()
        hours, minutes = divmod(max(int(seconds // 60), 0), 60)
        held += f" {hours} h {minutes} min" if hours else f" {minutes} min" if minutes else " under a minute"
    how = _HOLD_ENDS.get(str(outcome), str(outcome))
    if outcome == "lost":
        how += ": waiting for room" if a.get("status") == "queued" else ", waited for room"
    return [("hold", f"{held}, {how} ({when(ended)})")]


def cmd_list(args: argparse.Namespace, out: Output) -> int:
    api = client(args)
    params = [("status", s) for s in args.status or []]
    if args.tenant is not None:
        params.append(("tenant", str(resolve_tenant(api, args.tenant))))
    if args.all_pages:
        results = api.get_all("/allocations/", params)
        page: JsonObject = {"count": len(results), "results": results}
    else:
        page = api.get("/allocations/", params)
        results = page["results"]

    def human() -> str:
        if not results:
            return "No allocations."
        rows = [
            (
                a["id"],
                _status_cell(a),
                a["tenant_name"],
                a["pool_name"],
                a["profile"],
                a["count"],
                a["lease_hours"],
                a["requested_by"],
                when(a["created_at"]),
                when(a.get("lease_expires_at")),
            )
            for a in results
        ]
        text = table(["ID", "STATUS", "TENANT", "POOL", "PROFILE", "COUNT", "HOURS", "BY", "CREATED", "EXPIRES"], rows)
        if any(a.get("is_borrowed") for a in results):
            text += f"\n{BORROWED_NOTE}"
        if page["count"] > len(results):
            text += f"\n{len(results)} of {page['count']}; --all-pages shows the rest."
        return text

    emit(out, page, human)
    return EXIT_OK


def _allocation_path(allocation_id: int, action: str = "") -> str:
    return f"/allocations/{allocation_id}/{action + '/' if action else ''}"


def _not_found_is_named(allocation_id: int, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except ApiError as exc:
        if exc.status == 404:
            raise ApiError(404, f"Allocation {allocation_id} not found.") from None
        raise


def cmd_show(args: argparse.Namespace, out: Output) -> int:
    api = client(args)
    allocation = _not_found_is_named(args.id, lambda: api.get(_allocation_path(args.id)))
    emit(out, allocation, lambda: describe_allocation(allocation, full=True))
    return EXIT_OK


def _transition(args: argparse.Namespace, out: Output, action: str, body: JsonObject | None) -> int:
    api = client(args)
    allocation = _not_found_is_named(args.id, lambda: api.post(_allocation_path(args.id, action), body))
    emit(out, allocation, lambda: describe_allocation(allocation, full=False))
    return EXIT_OK


def cmd_release(args: argparse.Namespace, out: Output) -> int:
    return _transition(args, out, "release", None)


def cmd_extend(args: argparse.Namespace, out: Output) -> int:
    """200: the extension applied and the answer is the allocation; 202: it waits for a manager and the
    answer is the pending extension. Says which of the two happened."""
    api = client(args)
    body = {"hours": args.hours, "ask_booking_owner": bool(args.ask_booking_owner)}
    try:
        answer = _not_found_is_named(args.id, lambda: api.post(_allocation_path(args.id, "extend"), body))
    except ApiError as exc:
        # A booking in the way: the portal names its API field; here the way to ask is an option.
        if "(ask_booking_owner)" not in exc.reason:
            raise
        raise ApiError(exc.status, exc.reason.replace("(ask_booking_owner)", "(--ask-booking-owner)")) from None
    if api.last_status == 202 and answer.get("waiting_for_bookings"):
        names = ", ".join(f"#{pk}" for pk in answer["waiting_for_bookings"])
        message = (
            f"Extension #{answer['id']} of allocation #{answer['allocation']} by {answer['hours']} h would use room "
            f"booking {names} holds: its owner is asked to agree. `fatia show {answer['allocation']}` shows the "
            "lease once it is decided."
        )
    elif api.last_status == 202:
        message = (
            f"Extension #{answer['id']} of allocation #{answer['allocation']} by {answer['hours']} h waits for a "
            f"manager: the whole lease would be {answer['lease_hours_after']} h, past what applies at once. "
            f"`fatia show {answer['allocation']}` shows the lease once it is decided."
        )
    else:
        message = (
            f"Extended at once by {args.hours} h: allocation #{answer['id']} now has a "
            f"{answer['lease_hours']} h lease, ending {when(answer.get('lease_expires_at'))}."
        )
    emit(out, answer, lambda: message)
    return EXIT_OK


def cmd_approve(args: argparse.Namespace, out: Output) -> int:
    return _transition(args, out, "approve", {"reason": args.reason or ""})


def cmd_reject(args: argparse.Namespace, out: Output) -> int:
    return _transition(args, out, "reject", {"reason": args.reason})


def cmd_token_create(args: argparse.Namespace, out: Output) -> int:
    body: JsonObject = {"name": args.name, "scope": args.scope}
    if args.expires:
        body["expires_at"] = args.expires
    token = client(args).post("/tokens/", body)

    def human() -> str:
        return (
            f"Token #{token['id']} {token['name']!r} ({token['scope']}), "
            f"expires {when(token.get('expires_at')) if token.get('expires_at') else 'never'}:\n"
            f"{token['token']}\n"
            "It is shown only now: store it somewhere safe."
        )

    emit(out, token, human)
    return EXIT_OK


def cmd_token_list(args: argparse.Namespace, out: Output) -> int:
    tokens = client(args).get_all("/tokens/")

    def human() -> str:
        if not tokens:
            return "No tokens."
        rows = [
            (
                t["id"],
                t["name"],
                t["prefix"],
                t["scope"],
                when(t["created_at"]),
                when(t.get("expires_at")),
                when(t.get("last_used_at")),
                "revoked" if t.get("revoked_at") else "active",
            )
            for t in tokens
        ]
        return table(["ID", "NAME", "PREFIX", "SCOPE", "CREATED", "EXPIRES", "LAST USED", "STATE"], rows)

    emit(out, tokens, human)
    return EXIT_OK


def cmd_token_revoke(args: argparse.Namespace, out: Output) -> int:
    api = client(args)
    try:
        api.delete(f"/tokens/{args.id}/")
    except ApiError as exc:
        if exc.status == 404:
            raise ApiError(404, f"Token {args.id} not found among your tokens.") from None
        raise
    emit(out, {"revoked": args.id}, lambda: f"Token {args.id} revoked.")
    return EXIT_OK


# --- wiring ----------------------------------------------------------------------------------------


def client(args: argparse.Namespace) -> Api:
    config = read_config(config_path())
    url = args.url or os.environ.get("FATIA_URL") or config.get("url")
    token = args.token or os.environ.get("FATIA_TOKEN") or config.get("token")
    if not url or not token:
        raise ConfigError("Not logged in: run `fatia login --url URL --token TOKEN` or set FATIA_URL and FATIA_TOKEN.")
    return Api(normalize_url(url), token, timeout=timeout_of(args))


def timeout_of(args: argparse.Namespace) -> float:
    if args.timeout is not None:
        return float(args.timeout)
    raw = os.environ.get("FATIA_TIMEOUT")
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        return _timeout(raw)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"FATIA_TIMEOUT: {exc}.") from None


def _prompt(label: str) -> str:
    if not sys.stdin.isatty():
        raise ConfigError("No URL given: pass --url or set FATIA_URL.")
    return input(label)


def _read_secret(label: str) -> str:
    """From the terminal without echo, or the first line of piped stdin (keeps it out of shell history)."""
    if sys.stdin.isatty():
        return getpass.getpass(label).strip()
    return sys.stdin.readline().strip()


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be 1 or more")
    return value


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 600:
        raise argparse.ArgumentTypeError("use 0 < seconds <= 600")
    return value


def _global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The same flags before and after the command: `fatia --json list` and `fatia list --json`."""

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("--json", action="store_true", default=default(False), help="print raw JSON for scripts")
    parser.add_argument("--url", default=default(None), help="portal URL (overrides FATIA_URL and the config)")
    parser.add_argument("--token", default=default(None), help="API token (overrides FATIA_TOKEN and the config)")
    parser.add_argument(
        "--timeout",
        type=_timeout,
        default=default(None),
        help=f"seconds to wait for each HTTP call (default {DEFAULT_TIMEOUT_S:g}, or FATIA_TIMEOUT)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fatia", description="Request and manage NVIDIA MIG GPU slices on the Fatia portal."
    )
    parser.add_argument("--version", action="version", version=f"fatia {VERSION}")
    _global_options(parser, defaults=True)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, defaults=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    command("login", cmd_login, "check a token against the portal and remember URL and token")
    command("logout", cmd_logout, "forget the stored URL and token")
    command("whoami", cmd_whoami, "who the token belongs to, and your tenants")
    sub = command("pools", cmd_pools, "node pools and the MIG profiles they offer")
    # `fatia pools admission` (issue 14), platform admins. Here, not at the top: it imports this module.
    from allocations.admission.cli import add_pool_commands

    add_pool_commands(sub, common)

    sub = command("quota", cmd_quota, "quota balances, in slices and GPU-equivalents")
    sub.add_argument("--tenant", help="tenant slug or id")

    sub = command("request", cmd_request, "ask for MIG slices, or shares of whole GPUs in time-sliced and MPS pools")
    sub.add_argument("--pool", required=True, help="pool slug or id")
    sub.add_argument("--profile", help="MIG pools: the MIG profile, e.g. 1g.10gb")
    sub.add_argument("--memory-mib", type=int, help="time-sliced and MPS pools: GPU memory per share in MiB")
    sub.add_argument("--threads", type=int, help="MPS pools: active-thread percentage per share (1-100)")
    sub.add_argument(
        "--movable",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compaction may move the slices, restarting their pods (default: the tenant's policy)",
    )
    sub.add_argument("--count", required=True, type=int, help="number of slices or shares")
    sub.add_argument("--lease-hours", required=True, type=int, help="lease length in hours")
    sub.add_argument("--purpose", required=True, help="what the slices are for")
    sub.add_argument("--tenant", help="tenant slug or id (needed when you are in several)")
    sub.add_argument(
        "--namespace", help="where the claims go: one of the tenant's namespaces (default: the portal-made one)"
    )
    sub.add_argument("--idempotency-key", help="reuse to repeat a request safely (default: a new UUID)")

    sub = command("list", cmd_list, "your tenants' allocations, newest first")
    sub.add_argument("--status", action="extend", nargs="+", metavar="S", help="only these statuses")
    sub.add_argument("--tenant", help="tenant slug or id")
    sub.add_argument("--all-pages", action="store_true", help="fetch every page, not just the first")

    sub = command("show", cmd_show, "one allocation with its placements and timeline")
    sub.add_argument("id", type=_positive_int)

    sub = command("release", cmd_release, "give an allocation's slices back")
    sub.add_argument("id", type=_positive_int)

    sub = command("extend", cmd_extend, "lengthen an active lease (past the auto-approve lease, a manager decides)")
    sub.add_argument("id", type=_positive_int)
    sub.add_argument("--hours", required=True, type=_positive_int, help="hours to add")
    sub.add_argument(
        "--ask-booking-owner",
        action="store_true",
        help="if a booking needs these slots, ask its owner to agree instead of being refused",
    )

    sub = command("approve", cmd_approve, "approve a pending request (tenant managers)")
    sub.add_argument("id", type=_positive_int)
    sub.add_argument("--reason", help="optional note")

    sub = command("reject", cmd_reject, "reject a pending request (tenant managers)")
    sub.add_argument("id", type=_positive_int)
    sub.add_argument("--reason", required=True, help="why; the requester sees it")

    # Workloads and the advisor (issue 17), in their own module.
    from allocations import cli_workloads

    cli_workloads.add_commands(command)
    # Bookings (issue 15). Imported here, not at the top: cli_book uses this module's helpers.
    from allocations.cli_book import add_book_commands

    add_book_commands(commands, common, _positive_int)
    from allocations import cli_queue  # here, not at the top: it imports this module

    cli_queue.add_commands(command)
    # Cohorts (issue 15), platform admins: allocations/cohorts/cli.py (it imports this module too).
    from allocations.cohorts.cli import add_cohort_commands

    add_cohort_commands(commands, common, _positive_int)

    # What-if for planners (issue 14). Here, not at the top: it imports this module.
    from allocations.planning import cli as cli_what_if

    cli_what_if.add_commands(command)

    token = commands.add_parser("token", help="your API tokens", description="Create, list and revoke API tokens.")
    token_commands = token.add_subparsers(dest="token_command", required=True, metavar="ACTION")

    def token_command(name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        sub = token_commands.add_parser(name, parents=[common], help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    sub = token_command("create", cmd_token_create, "create a token (needs a write token)")
    sub.add_argument("--name", required=True)
    sub.add_argument("--scope", required=True, choices=["read", "write"])
    sub.add_argument("--expires", metavar="ISO", help="expiry, e.g. 2026-12-31T00:00:00Z")
    token_command("list", cmd_token_list, "list your tokens")
    sub = token_command("revoke", cmd_token_revoke, "revoke one of your tokens")
    sub.add_argument("id", type=_positive_int)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    out = Output(json_output=args.json)
    handler: Handler = args.handler
    try:
        return handler(args, out)
    except CliError as exc:
        print(f"fatia: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except (KeyError, TypeError, AttributeError) as exc:  # a JSON answer of another shape than this CLI knows
        print(
            f"fatia: error: The server's answer has an unexpected shape ({type(exc).__name__}: {exc}); "
            "is the URL the portal's, and is this CLI up to date?",
            file=sys.stderr,
        )
        return EXIT_API_ERROR
    except BrokenPipeError:  # `fatia list | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        print("fatia: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
