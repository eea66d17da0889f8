#!/usr/bin/env python3
"""What a server returns when the model, given a tool's result, writes a call again (issue 35):
for a few one-tool conversations (the user asks, the assistant calls the tool in <tool_call>
tags, the tool answers), ask for the next turn under tool_choice "auto" at temperature 0 and
report, per conversation, the model's raw text (from the server's own prompt rendering, sent
back as a plain completion) and what the chat endpoint made of it: content, tool calls, finish.

Usage: after_tool_result.py --base-url http://127.0.0.1:PORT --kind pagoda|llama-server
(the raw text needs pagoda's /tokenize with messages, or llama-server's /apply-template)."""

import argparse
import json
import urllib.request

CASES = [
    ("What is the weather like in Paris right now?", "get_weather", {"city": "Paris"},
     "18 degrees Celsius and cloudy"),
    ("What is the weather in Tokyo?", "get_weather", {"city": "Tokyo"}, "25 degrees and sunny"),
    ("Is it raining in London?", "get_weather", {"city": "London"}, "light rain, 11 degrees"),
    ("What is 1234 plus 4321?", "add", {"a": 1234, "b": 4321}, "5555"),
    ("What is the price of AAPL stock?", "get_stock_price", {"symbol": "AAPL"}, "189.20 USD"),
]
TOOLS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]},
    "add": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"]},
    "get_stock_price": {"type": "object", "properties": {"symbol": {"type": "string"}},
                        "required": ["symbol"]},
}


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def conversation(ask, name, args, result):
    return [{"role": "user", "content": ask},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": result}]


def raw_text(base, kind, messages, tools):
    if kind == "pagoda":
        toks = post(base + "/tokenize", {"messages": messages, "tools": tools,
                                         "add_generation_prompt": True})["tokens"]
        prompt = toks
    else:
        prompt = post(base + "/apply-template", {"messages": messages, "tools": tools})["prompt"]
    r = post(base + "/v1/completions", {"model": "m", "prompt": prompt, "temperature": 0,
                                         "max_tokens": 80})
    return r["choices"][0]["text"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--kind", choices=["pagoda", "llama-server"], required=True)
    a = p.parse_args()
    base = a.base_url.rstrip("/")
    model = json.load(urllib.request.urlopen(base + "/v1/models"))["data"][0]["id"]
    for ask, name, args, result in CASES:
        tools = [{"type": "function", "function": {"name": n, "description": n.replace("_", " "),
                                                   "parameters": s}}
                 for n, s in TOOLS.items()]
        msgs = conversation(ask, name, args, result)
        try:
            raw = raw_text(base, a.kind, msgs, tools)
        except Exception as e:  # noqa: BLE001 - report, go on
            raw = f"<no raw text: {e}>"
        r = post(base + "/v1/chat/completions", {"model": model, "messages": msgs, "tools": tools,
                                                  "tool_choice": "auto", "temperature": 0,
                                                  "max_tokens": 80})
        ch = r["choices"][0]
        calls = [(c["function"]["name"], c["function"]["arguments"])
                 for c in ch["message"].get("tool_calls") or []]
        print(json.dumps({"ask": ask, "raw": raw, "finish": ch["finish_reason"],
                          "content": ch["message"].get("content"), "tool_calls": calls}))


if __name__ == "__main__":
    main()
