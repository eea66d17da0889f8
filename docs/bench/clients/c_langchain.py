"""langchain-openai: ChatOpenAI invoke, stream (with stream usage), with_structured_output,
bind_tools round trip, errors, usage_metadata; OpenAIEmbeddings."""

import openai
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI, OpenAIEmbeddings

from common import (CHAT_ASK, EMBED_INPUTS, STRUCT_ASK, TOOL_ASK, TOOL_RESULT, Capital,
                    capital_ok, check, expect, short, weather_args_ok)

LIB = "langchain"


def llm(t, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 32)
    return ChatOpenAI(model=t.model, base_url=t.v1, api_key="x", max_retries=0, timeout=120,
                      **kw)


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return TOOL_RESULT


@check(LIB)
def invoke(t):
    r = llm(t).invoke(CHAT_ASK)
    expect(isinstance(r.content, str) and r.content.strip(), f"content {r.content!r}")


@check(LIB)
def stream(t):
    whole = llm(t).invoke(CHAT_ASK).content
    chunks = list(llm(t, stream_usage=True).stream(CHAT_ASK))
    text = "".join(c.content for c in chunks)
    expect(text == whole, f"stream {text!r} != {whole!r}")
    usage = [c.usage_metadata for c in chunks if c.usage_metadata]
    expect(usage and usage[-1]["output_tokens"] > 0, f"stream usage {usage!r}")


@check(LIB)
def structured_output(t):
    out = llm(t, max_tokens=80).with_structured_output(Capital).invoke(STRUCT_ASK)
    capital_ok(out)


@check(LIB)
def structured_output_function_calling(t):
    out = llm(t, max_tokens=80).with_structured_output(
        Capital, method="function_calling").invoke(STRUCT_ASK)
    capital_ok(out)


@check(LIB)
def tool_round_trip(t):
    bound = llm(t, max_tokens=80).bind_tools([get_weather])
    msgs = [HumanMessage(TOOL_ASK)]
    r = bound.invoke(msgs)
    expect(len(r.tool_calls) == 1 and r.tool_calls[0]["name"] == "get_weather",
           f"first turn: tool_calls {short(r.tool_calls)}, content {short(r.content)}")
    weather_args_ok(r.tool_calls[0]["args"])
    msgs += [r, ToolMessage(get_weather.invoke(r.tool_calls[0]["args"]),
                            tool_call_id=r.tool_calls[0]["id"])]
    a = bound.invoke(msgs)
    expect(not a.tool_calls, f"second turn called again: {short(a.tool_calls)}")
    expect(isinstance(a.content, str) and a.content.strip(), "empty answer after the tool result")


@check(LIB)
def error_bad_request(t):
    try:
        llm(t, model_kwargs={"top_p": 7}).invoke(CHAT_ASK)
    except openai.BadRequestError:
        return
    raise AssertionError("top_p 7 was accepted")


@check(LIB)
def usage_metadata(t):
    r = llm(t).invoke(CHAT_ASK)
    u = r.usage_metadata
    expect(u and u["input_tokens"] > 0 and u["output_tokens"] > 0, f"usage {u!r}")
    expect(u["total_tokens"] == u["input_tokens"] + u["output_tokens"], f"usage {u!r}")


@check(LIB, needs="embed")
def embeddings(t):
    # check_embedding_ctx_length=False: otherwise it tokenizes with tiktoken (OpenAI's
    # tokenizer, downloaded) and sends token ids, which only OpenAI's own models understand.
    e = OpenAIEmbeddings(model=t.embed_model, base_url=t.embed_v1, api_key="x",
                         check_embedding_ctx_length=False, max_retries=0)
    docs = e.embed_documents(EMBED_INPUTS)
    q = e.embed_query(EMBED_INPUTS[0])
    expect(len(docs) == 2 and len(docs[0]) == 384, f"{len(docs)} vectors")
    expect(max(abs(a - b) for a, b in zip(q, docs[0])) < 1e-5, "query != document vector")
