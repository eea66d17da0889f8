"""openai-agents: an Agent on the Chat Completions model and on the Responses model: a run,
a streamed run, a typed output, a function tool the agent calls and then answers from, errors,
usage. Tracing is off (it would upload to OpenAI)."""

import asyncio

import openai
from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel,
                    Runner, function_tool, set_tracing_disabled)
from agents.items import ToolCallOutputItem

from common import (CHAT_ASK, STRUCT_ASK, TOOL_ASK, TOOL_RESULT, Capital, capital_ok, check,
                    expect, short)

LIB = "agents"
set_tracing_disabled(True)


def model(t, responses=False, name=None):
    c = openai.AsyncOpenAI(base_url=t.v1, api_key="x", max_retries=0, timeout=120.0)
    cls = OpenAIResponsesModel if responses else OpenAIChatCompletionsModel
    return cls(model=name or t.model, openai_client=c)


def agent(t, responses=False, **kw):
    kw.setdefault("instructions", "You are a helpful assistant. Answer briefly.")
    return Agent(name="assistant", model=model(t, responses),
                 model_settings=ModelSettings(temperature=0, max_tokens=80), **kw)


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return TOOL_RESULT


def round_trip(t, responses):
    r = Runner.run_sync(agent(t, responses, tools=[get_weather]), TOOL_ASK, max_turns=3)
    outputs = [i for i in r.new_items if isinstance(i, ToolCallOutputItem)]
    expect(outputs, f"no tool call; final output {short(r.final_output)}")
    expect(isinstance(r.final_output, str) and r.final_output.strip(),
           f"final output {short(r.final_output)}")


@check(LIB)
def run_chat_completions(t):
    r = Runner.run_sync(agent(t), CHAT_ASK)
    expect(isinstance(r.final_output, str) and r.final_output.strip(), f"{r.final_output!r}")


@check(LIB)
def run_responses(t):
    r = Runner.run_sync(agent(t, responses=True), CHAT_ASK)
    expect(isinstance(r.final_output, str) and r.final_output.strip(), f"{r.final_output!r}")


@check(LIB)
def run_streamed(t):
    async def go():
        r = Runner.run_streamed(agent(t), CHAT_ASK)
        text = ""
        async for ev in r.stream_events():
            if ev.type == "raw_response_event" and ev.data.type == "response.output_text.delta":
                text += ev.data.delta
        return text, r.final_output
    text, final = asyncio.run(go())
    expect(text.strip() and text == final, f"streamed {text!r}, final {final!r}")


@check(LIB)
def typed_output(t):
    r = Runner.run_sync(agent(t, output_type=Capital), STRUCT_ASK)
    capital_ok(r.final_output)


@check(LIB)
def tool_round_trip_chat_completions(t):
    round_trip(t, responses=False)


@check(LIB)
def tool_round_trip_responses(t):
    round_trip(t, responses=True)


@check(LIB)
def error_unknown_model(t):
    a = Agent(name="assistant", model=model(t, name="no-such-model"))
    try:
        Runner.run_sync(a, CHAT_ASK)
    except openai.NotFoundError:
        return
    raise AssertionError("an unknown model name was served")


@check(LIB)
def usage(t):
    r = Runner.run_sync(agent(t), CHAT_ASK)
    u = r.context_wrapper.usage
    expect(u.requests == 1 and u.input_tokens > 0 and u.output_tokens > 0, f"usage {u!r}")
