"""pydantic-ai: an Agent on the OpenAI chat model: a run, a streamed run, a typed output (its
output tool), a tool it calls and then answers from, usage."""

import asyncio

from pydantic_ai import Agent
from pydantic_ai.messages import ToolReturnPart
from pydantic_ai.providers.openai import OpenAIProvider

try:
    from pydantic_ai.models.openai import OpenAIChatModel
except ImportError:  # before 1.0
    from pydantic_ai.models.openai import OpenAIModel as OpenAIChatModel

from common import CHAT_ASK, STRUCT_ASK, TOOL_ASK, TOOL_RESULT, Capital, capital_ok, check, expect

LIB = "pydantic_ai"


def agent(t, **kw):
    m = OpenAIChatModel(t.model, provider=OpenAIProvider(base_url=t.v1, api_key="x"))
    return Agent(m, model_settings={"temperature": 0, "max_tokens": 80}, **kw)


@check(LIB)
def run(t):
    r = agent(t).run_sync(CHAT_ASK)
    expect(isinstance(r.output, str) and r.output.strip(), f"output {r.output!r}")


@check(LIB)
def run_stream(t):
    async def go():
        async with agent(t).run_stream(CHAT_ASK) as s:
            return "".join([d async for d in s.stream_text(delta=True)])
    text = asyncio.run(go())
    expect(text.strip(), f"streamed {text!r}")


@check(LIB)
def typed_output(t):
    capital_ok(agent(t, output_type=Capital).run_sync(STRUCT_ASK).output)


@check(LIB)
def tool_round_trip(t):
    a = agent(t)

    @a.tool_plain
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return TOOL_RESULT

    r = a.run_sync(TOOL_ASK)
    returns = [p for m in r.all_messages() for p in getattr(m, "parts", [])
               if isinstance(p, ToolReturnPart)]
    expect(returns, f"no tool call; output {r.output!r}")
    expect(isinstance(r.output, str) and r.output.strip(), f"output {r.output!r}")


@check(LIB)
def usage(t):
    u = agent(t).run_sync(CHAT_ASK).usage
    u = u() if callable(u) else u  # a method before 2.x, a property after
    inp = getattr(u, "input_tokens", None) or getattr(u, "request_tokens", 0)
    out = getattr(u, "output_tokens", None) or getattr(u, "response_tokens", 0)
    expect(inp > 0 and out > 0, f"usage {u!r}")
