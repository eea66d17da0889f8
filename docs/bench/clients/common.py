"""Shared pieces of the client-library suite: the check registry, what every library is asked,
and how a check reports. Each check prints one line, `PASS lib.check`,
`FAIL lib.check: reason`, or `SKIP lib.check: reason` (embeddings without an embedding server); scripts/client-suite.sh counts them."""

import json
import time
import traceback

from pydantic import BaseModel

CHECKS = []  # (library, name, function, needs) with needs "chat" or "embed"


def check(lib, needs="chat"):
    def wrap(fn):
        CHECKS.append((lib, fn.__name__, fn, needs))
        return fn
    return wrap


class Failed(Exception):
    pass


def expect(cond, message):
    if not cond:
        raise Failed(message)


class Target:
    """The servers under test: `base` is the root URL (no /v1) of the chat server, `embed` of
    the embedding server (or None)."""

    def __init__(self, base, model, embed, embed_model):
        self.base, self.model = base.rstrip("/"), model
        self.embed = embed.rstrip("/") if embed else None
        self.embed_model = embed_model

    @property
    def v1(self):
        return self.base + "/v1"

    @property
    def embed_v1(self):
        return self.embed + "/v1"


# What every library asks, so that the libraries are compared on the same requests.
CHAT_ASK = "Name one colour of the rainbow. Answer in one word."
STRUCT_ASK = "What is the capital of France? Give the country and its capital city."
TOOL_ASK = "What is the weather like in Paris right now?"
TOOL_RESULT = "18 degrees Celsius and cloudy"
EMBED_INPUTS = ["The cat sat on the mat.", "A dog barked at the mailman."]

WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string"}},
                  "required": ["city"]}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": WEATHER_PARAMS}}


class Capital(BaseModel):
    country: str
    city: str


def capital_ok(obj):
    expect(isinstance(obj, Capital), f"parsed {obj!r}")
    expect("paris" in obj.city.lower(), f"city {obj.city!r}")


def weather_args_ok(arguments):
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    expect(isinstance(args, dict) and "paris" in str(args.get("city", "")).lower(),
           f"arguments {arguments!r}")


def short(x, n=160):
    s = repr(x)
    return s if len(s) <= n else s[:n] + "..."


def run_checks(target, libs, only):
    passed = failed = 0
    for lib, name, fn, needs in CHECKS:
        if libs and lib not in libs:
            continue
        if only and f"{lib}.{name}" not in only and name not in only:
            continue
        label = f"{lib}.{name}"
        if needs == "embed" and not target.embed:
            print(f"SKIP {label}: no embedding server given (--embed-base-url)", flush=True)
            continue
        t0 = time.monotonic()
        try:
            fn(target)
        except Failed as e:
            print(f"FAIL {label}: {e} ({time.monotonic() - t0:.1f} s)", flush=True)
            failed += 1
            continue
        except Exception as e:  # a library error is a failure with its reason, not a crash
            tb = traceback.extract_tb(e.__traceback__)
            where = f"{tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else "?"
            msg = " ".join(str(e).split())[:300]
            print(f"FAIL {label}: {type(e).__name__}: {msg} [{where}] "
                  f"({time.monotonic() - t0:.1f} s)", flush=True)
            failed += 1
            continue
        print(f"PASS {label} ({time.monotonic() - t0:.1f} s)", flush=True)
        passed += 1
    return passed, failed
