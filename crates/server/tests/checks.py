"""The harness the Python client checks share: a check is a function of a context that raises
`Failed` (an expected failure, printed alone) or any other exception (printed with its
traceback). `run_all` sends the checks at once (they are independent and greedy, so the server
batches them and outputs do not change), prints each one's result in order, and returns the
process's exit status."""

import io
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor


class Failed(Exception):
    pass


def select(checks, names):
    """The checks named in a comma-separated `names` (all when empty); exits on unknown ones."""
    if not names:
        return list(checks)
    wanted = names.split(",")
    unknown = set(wanted) - {fn.__name__ for fn in checks}
    if unknown:
        raise SystemExit(f"unknown checks: {sorted(unknown)}")
    return [fn for fn in checks if fn.__name__ in wanted]


def complete_sdk_models():
    """Completes, in this thread, every pydantic model the SDKs have loaded (their `types`
    modules), before checks run in threads: pydantic completes a model with forward references
    on first use, and two threads doing so at once can fail (pydantic issue 11849; seen here
    once, under load: "BaseModel cannot be instantiated directly" reading a chat completion's
    logprobs). About 0.3 s for the openai SDK's ~670 models."""
    import importlib

    import pydantic

    # The packages of the response types the checks read (the SDKs import some of them only
    # when a resource is first used, which would be in a check's thread).
    for sdk, packages in (("openai", ("types", "types.chat", "types.responses")),
                          ("anthropic", ("types",))):
        if sdk in sys.modules:
            for package in packages:
                importlib.import_module(f"{sdk}.{package}")
    sdks = ("openai.types", "anthropic.types")
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(sdks):
            continue
        for value in list(vars(module).values()):
            if (isinstance(value, type) and issubclass(value, pydantic.BaseModel)
                    and value is not pydantic.BaseModel and value.__module__ == name):
                value.model_rebuild()


def run_all(checks, ctx, label=""):
    """Runs `checks` against `ctx` concurrently; 0 when every one passed, else 1."""
    complete_sdk_models()

    def run(fn):
        out = io.StringIO()
        try:
            fn(ctx)
            print(f"ok    {fn.__name__}", file=out)
            return out.getvalue(), None
        except Exception as e:  # noqa: BLE001 - report every failure
            print(f"FAIL  {fn.__name__}: {e}", file=out)
            if not isinstance(e, Failed):
                traceback.print_exc(file=out)
            return out.getvalue(), fn.__name__

    failed = []
    with ThreadPoolExecutor(max_workers=max(1, len(checks))) as pool:
        for text, failure in pool.map(run, checks):
            print(text, end="", flush=True)
            if failure:
                failed.append(failure)
    suffix = f" ({label})" if label else ""
    print(f"{len(checks) - len(failed)}/{len(checks)} checks passed{suffix}")
    return 1 if failed else 0
