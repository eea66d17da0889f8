"""openai (Python): chat, stream, structured output, tool round trip, errors, usage,
embeddings (the SDK asks for base64 by default)."""

import openai

from common import (CHAT_ASK, EMBED_INPUTS, STRUCT_ASK, TOOL_ASK, TOOL_RESULT, WEATHER_TOOL,
                    Capital, capital_ok, check, expect, short, weather_args_ok)

LIB = "openai"


def client(t, base=None):
    return openai.OpenAI(base_url=base or t.v1, api_key="x", max_retries=0, timeout=120.0)


def chat(t, **kw):
    kw.setdefault("model", t.model)
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 32)
    return client(t).chat.completions.create(**kw)


@check(LIB)
def chat_completion(t):
    r = chat(t, messages=[{"role": "user", "content": CHAT_ASK}])
    c = r.choices[0]
    expect((c.message.content or "").strip(), "empty content")
    expect(c.finish_reason in ("stop", "length"), f"finish_reason {c.finish_reason!r}")
    expect(r.object == "chat.completion", f"object {r.object!r}")


@check(LIB)
def stream_with_usage(t):
    whole = chat(t, messages=[{"role": "user", "content": CHAT_ASK}])
    text, finish, usage = "", None, None
    for chunk in chat(t, messages=[{"role": "user", "content": CHAT_ASK}], stream=True,
                      stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    expect(text == whole.choices[0].message.content,
           f"stream {text!r} != non-streamed {whole.choices[0].message.content!r}")
    expect(finish in ("stop", "length"), f"finish_reason {finish!r}")
    expect(usage and usage.completion_tokens == whole.usage.completion_tokens,
           f"stream usage {usage!r} vs {whole.usage!r}")


@check(LIB)
def structured_output_parse(t):
    r = client(t).chat.completions.parse(
        model=t.model, temperature=0, max_tokens=80, response_format=Capital,
        messages=[{"role": "user", "content": STRUCT_ASK}])
    capital_ok(r.choices[0].message.parsed)


@check(LIB)
def tool_round_trip(t):
    ask = [{"role": "user", "content": TOOL_ASK}]
    r = chat(t, messages=ask, tools=[WEATHER_TOOL], tool_choice="auto", max_tokens=80)
    m = r.choices[0].message
    calls = m.tool_calls or []
    expect(len(calls) == 1 and calls[0].function.name == "get_weather",
           f"first turn: calls {short(calls)}, content {short(m.content)}")
    expect(r.choices[0].finish_reason == "tool_calls", f"finish {r.choices[0].finish_reason!r}")
    weather_args_ok(calls[0].function.arguments)
    follow = ask + [m.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": calls[0].id, "content": TOOL_RESULT}]
    a = chat(t, messages=follow, tools=[WEATHER_TOOL], tool_choice="auto", max_tokens=80)
    am = a.choices[0].message
    expect(not am.tool_calls, f"second turn called again: {short(am.tool_calls)}")
    expect((am.content or "").strip(), "empty answer after the tool result")
    expect("{" not in am.content or "18" in am.content,
           f"answer is not about the result: {short(am.content)}")


@check(LIB)
def streamed_tool_call(t):
    pieces, finish = {}, None
    for chunk in chat(t, messages=[{"role": "user", "content": TOOL_ASK}], tools=[WEATHER_TOOL],
                      tool_choice="auto", stream=True, max_tokens=80):
        for ch in chunk.choices:
            finish = ch.finish_reason or finish
            for tc in ch.delta.tool_calls or []:
                p = pieces.setdefault(tc.index, {"name": "", "arguments": ""})
                p["name"] += (tc.function and tc.function.name) or ""
                p["arguments"] += (tc.function and tc.function.arguments) or ""
    expect(len(pieces) == 1 and pieces[0]["name"] == "get_weather", f"streamed calls {pieces!r}")
    weather_args_ok(pieces[0]["arguments"])
    expect(finish == "tool_calls", f"finish {finish!r}")


@check(LIB)
def error_bad_request(t):
    try:
        chat(t, messages=[{"role": "user", "content": CHAT_ASK}], temperature=-1)
    except openai.BadRequestError as e:
        expect(e.status_code == 400, f"status {e.status_code}")
        return
    raise AssertionError("temperature -1 was accepted")


@check(LIB)
def error_unknown_model(t):
    try:
        chat(t, model="no-such-model", messages=[{"role": "user", "content": CHAT_ASK}])
    except openai.NotFoundError:
        return
    raise AssertionError("an unknown model name was served")


@check(LIB)
def usage(t):
    r = chat(t, messages=[{"role": "user", "content": CHAT_ASK}])
    u = r.usage
    expect(u.prompt_tokens > 0 and u.completion_tokens > 0, f"usage {u!r}")
    expect(u.total_tokens == u.prompt_tokens + u.completion_tokens, f"usage {u!r}")


@check(LIB, needs="embed")
def embeddings(t):
    c = client(t, t.embed_v1)
    r = c.embeddings.create(model=t.embed_model, input=EMBED_INPUTS)  # base64 on the wire
    expect(len(r.data) == 2 and len(r.data[0].embedding) == 384,
           f"{len(r.data)} vectors of {len(r.data[0].embedding) if r.data else 0}")
    f = c.embeddings.create(model=t.embed_model, input=EMBED_INPUTS[0], encoding_format="float")
    diff = max(abs(a - b) for a, b in zip(f.data[0].embedding, r.data[0].embedding))
    expect(diff < 1e-6, f"float and base64 vectors differ by {diff}")
    expect(r.usage.prompt_tokens > 0, f"usage {r.usage!r}")
