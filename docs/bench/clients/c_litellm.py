"""litellm (the `openai/` provider pointed at the server): a two-turn conversation replaying its
own message objects, stream, structured output, tool round trip, errors, usage, embeddings."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download at import

import litellm  # noqa: E402

from common import (CHAT_ASK, EMBED_INPUTS, STRUCT_ASK, TOOL_ASK, TOOL_RESULT,  # noqa: E402
                    WEATHER_TOOL, Capital, capital_ok, check, expect, short, weather_args_ok)

LIB = "litellm"


def completion(t, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 32)
    return litellm.completion(model=f"openai/{t.model}", api_base=t.v1, api_key="x",
                              num_retries=0, timeout=120, **kw)


@check(LIB)
def two_turn_conversation(t):
    msgs = [{"role": "user", "content": CHAT_ASK}]
    first = completion(t, messages=msgs)
    expect((first.choices[0].message.content or "").strip(), "empty first answer")
    msgs += [first.choices[0].message, {"role": "user", "content": "And another one?"}]
    second = completion(t, messages=msgs)
    expect((second.choices[0].message.content or "").strip(), "empty second answer")


@check(LIB)
def stream(t):
    msgs = [{"role": "user", "content": CHAT_ASK}]
    whole = completion(t, messages=msgs).choices[0].message.content
    text = "".join(c.choices[0].delta.content or "" for c in completion(t, messages=msgs,
                                                                         stream=True)
                   if c.choices)
    expect(text == whole, f"stream {text!r} != {whole!r}")


@check(LIB)
def structured_output(t):
    r = completion(t, messages=[{"role": "user", "content": STRUCT_ASK}], response_format=Capital,
                   max_tokens=80)
    capital_ok(Capital.model_validate_json(r.choices[0].message.content))


@check(LIB)
def tool_round_trip(t):
    msgs = [{"role": "user", "content": TOOL_ASK}]
    r = completion(t, messages=msgs, tools=[WEATHER_TOOL], tool_choice="auto", max_tokens=80)
    m = r.choices[0].message
    calls = m.tool_calls or []
    expect(len(calls) == 1 and calls[0].function.name == "get_weather",
           f"first turn: calls {short(calls)}, content {short(m.content)}")
    weather_args_ok(calls[0].function.arguments)
    msgs += [m, {"role": "tool", "tool_call_id": calls[0].id, "content": TOOL_RESULT}]
    a = completion(t, messages=msgs, tools=[WEATHER_TOOL], tool_choice="auto", max_tokens=80)
    am = a.choices[0].message
    expect(not am.tool_calls, f"second turn called again: {short(am.tool_calls)}")
    expect((am.content or "").strip(), "empty answer after the tool result")


@check(LIB)
def error_bad_request(t):
    try:
        completion(t, messages=[{"role": "user", "content": CHAT_ASK}], temperature=-1)
    except litellm.BadRequestError:
        return
    raise AssertionError("temperature -1 was accepted")


@check(LIB)
def usage(t):
    r = completion(t, messages=[{"role": "user", "content": CHAT_ASK}])
    u = r.usage
    expect(u.prompt_tokens > 0 and u.completion_tokens > 0, f"usage {u!r}")


@check(LIB, needs="embed")
def embeddings(t):
    r = litellm.embedding(model=f"openai/{t.embed_model}", api_base=t.embed_v1, api_key="x",
                          input=EMBED_INPUTS)
    expect(len(r.data) == 2 and len(r.data[0]["embedding"]) == 384, f"data {short(r.data)}")
