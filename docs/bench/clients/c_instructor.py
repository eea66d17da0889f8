"""instructor: a Pydantic model out of the openai client in its TOOLS mode (a named
tool_choice), JSON mode (response_format json_object), a streamed partial model, and the
completion's usage beside the model."""

import instructor
import openai

from common import STRUCT_ASK, Capital, capital_ok, check, expect

LIB = "instructor"


def client(t, mode):
    return instructor.from_openai(
        openai.OpenAI(base_url=t.v1, api_key="x", max_retries=0, timeout=120.0), mode=mode)


def ask(t, mode, **kw):
    return client(t, mode).chat.completions.create(
        model=t.model, temperature=0, max_tokens=80, max_retries=1,
        messages=[{"role": "user", "content": STRUCT_ASK}], response_model=Capital, **kw)


@check(LIB)
def tools_mode(t):
    capital_ok(ask(t, instructor.Mode.TOOLS))


@check(LIB)
def json_mode(t):
    capital_ok(ask(t, instructor.Mode.JSON))


@check(LIB)
def json_schema_mode(t):
    capital_ok(ask(t, instructor.Mode.JSON_SCHEMA))


@check(LIB)
def streamed_partial(t):
    last = None
    for part in client(t, instructor.Mode.TOOLS).chat.completions.create_partial(
            model=t.model, temperature=0, max_tokens=80,
            messages=[{"role": "user", "content": STRUCT_ASK}], response_model=Capital):
        last = part
    expect(last is not None, "no partial model")
    capital_ok(Capital.model_validate(last.model_dump()))


@check(LIB)
def usage_beside_the_model(t):
    obj, completion = client(t, instructor.Mode.TOOLS).chat.completions.create_with_completion(
        model=t.model, temperature=0, max_tokens=80,
        messages=[{"role": "user", "content": STRUCT_ASK}], response_model=Capital)
    capital_ok(obj)
    expect(completion.usage.completion_tokens > 0, f"usage {completion.usage!r}")
