#!/usr/bin/env python3
"""The client-library suite (issue 35): the libraries applications build on, unmodified,
against a running OpenAI-compatible server (pagoda or a peer). One line per check, then the
pass count. Run through scripts/client-suite.sh, which makes the virtualenv.

Usage: suite.py --base-url http://127.0.0.1:8000 [--embed-base-url URL] [--libs a,b]
                [--only lib.check,...]
"""

import argparse
import json
import sys
import urllib.request

import common
# Each module registers its checks on import, in this order.
import c_openai  # noqa: F401
import c_responses  # noqa: F401
import c_langchain  # noqa: F401
import c_litellm  # noqa: F401
import c_agents  # noqa: F401
import c_anthropic  # noqa: F401
import c_instructor  # noqa: F401
import c_pydantic_ai  # noqa: F401


def served_model(base):
    with urllib.request.urlopen(base.rstrip("/") + "/v1/models", timeout=30) as r:
        return json.load(r)["data"][0]["id"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True, help="root URL of the chat server, no /v1")
    p.add_argument("--embed-base-url", help="root URL of a server holding an embedding model")
    p.add_argument("--libs", default="", help="comma-separated libraries (default: all)")
    p.add_argument("--only", default="", help="comma-separated checks (lib.check or check)")
    a = p.parse_args()
    model = served_model(a.base_url)
    embed_model = served_model(a.embed_base_url) if a.embed_base_url else None
    target = common.Target(a.base_url, model, a.embed_base_url, embed_model)
    libs = {x for x in a.libs.split(",") if x}
    only = {x for x in a.only.split(",") if x}
    passed, failed = common.run_checks(target, libs, only)
    print(f"python: {passed} passed, {failed} failed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
