//! Round trips of request and response bodies written after the OpenAI API reference examples
//! (and vLLM's extensions): parse, check the typed fields, serialize, compare as JSON values.
#![allow(clippy::unwrap_used)]

use pagoda_protocol::*;
use serde_json::{Value, json};

/// Parse `body` as `T`, serialize it back and require the same JSON value. Goes through text
/// because `to_value` widens f32 to f64 digits while `to_string` prints the shortest f32 form,
/// which is what goes on the wire.
fn round_trip<T>(body: &Value) -> T
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    let typed: T = serde_json::from_str(&body.to_string()).unwrap();
    let back: Value = serde_json::from_str(&serde_json::to_string(&typed).unwrap()).unwrap();
    assert_eq!(&back, body, "round trip changed the body");
    typed
}

#[test]
fn chat_request_with_every_kind_of_message() {
    let body = json!({
        "model": "gpt-4.1",
        "messages": [
            {"role": "developer", "content": "You are a helpful assistant."},
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "What's the weather like in Boston today?"}]},
            {"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_abc123", "type": "function",
                "function": {"name": "get_current_weather", "arguments": "{\n\"location\": \"Boston, MA\"\n}"}
            }]},
            {"role": "tool", "content": "{\"temperature\": 22}", "tool_call_id": "call_abc123"},
            {"role": "user", "name": "bob", "content": "Thanks"}
        ],
        "tools": [{"type": "function", "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
        }}],
        "tool_choice": "auto",
        "logprobs": true,
        "top_logprobs": 2,
        "max_completion_tokens": 64,
        "stream": true,
        "stream_options": {"include_usage": true},
        "stop": ["\n\n", "END"],
        "logit_bias": {"50256": -100.0, "1234": 2.5},
        "seed": 42,
        "temperature": 0.7,
        "top_p": 0.9,
        "n": 1,
        "user": "user-1234",
        "response_format": {"type": "json_object"},
        "top_k": 40,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "ignore_eos": false,
        "min_tokens": 2,
        "priority": -1,
        "cache_salt": "tenant-a",
        "skip_special_tokens": true,
        "include_stop_str_in_output": false,
        "prompt_logprobs": 1,
        "structured_outputs": {"regex": "[a-z]+"}
    });
    let req: ChatCompletionRequest = round_trip(&body);
    assert_eq!(req.messages.len(), 6);
    assert_eq!(req.messages[0].role, Role::Developer);
    assert_eq!(
        req.messages[2].content,
        Some(MessageContent::Parts(vec![ContentPart::text(
            "What's the weather like in Boston today?"
        )]))
    );
    assert_eq!(req.messages[3].content, None);
    let calls = req.messages[3].tool_calls.as_ref().unwrap();
    assert_eq!(calls[0].function.name, "get_current_weather");
    assert_eq!(req.messages[4].tool_call_id.as_deref(), Some("call_abc123"));
    assert_eq!(req.logprobs, Some(true));
    assert_eq!(req.stop.as_ref().unwrap().to_vec(), vec!["\n\n", "END"]);
    assert_eq!(req.logit_bias.as_ref().unwrap()["1234"], 2.5);
    assert_eq!(
        req.stream_options.as_ref().unwrap().include_usage,
        Some(true)
    );
    assert_eq!(req.top_k, Some(40));
    assert!(req.extra.is_empty());
}

#[test]
fn unknown_keys_are_collected_not_rejected() {
    let body = json!({
        "model": "m", "messages": [{"role": "user", "content": "hi"}],
        "temprature": 0.5, "frobnicate": {"x": 1}
    });
    let req: ChatCompletionRequest = round_trip(&body);
    let mut keys: Vec<_> = req.extra.keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, vec!["frobnicate", "temprature"]);
    assert_eq!(req.temperature, None);

    let body = json!({"model": "m", "prompt": "hi", "best_of": 2, "typo_field": true});
    let req: CompletionRequest = round_trip(&body);
    assert_eq!(req.extra.keys().collect::<Vec<_>>(), vec!["typo_field"]);
    assert_eq!(req.best_of, Some(2));
}

#[test]
fn unsupported_content_part_parses_for_the_server_to_reject() {
    let body = json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is in this image?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    ]}]});
    let req: ChatCompletionRequest = round_trip(&body);
    let Some(MessageContent::Parts(parts)) = &req.messages[0].content else {
        panic!()
    };
    assert_eq!(parts[1].kind, "image_url");
    assert!(parts[1].extra.contains_key("image_url"));
}

#[test]
fn chat_response_serializes_like_openai() {
    let body = json!({
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": 1741569952,
        "model": "gpt-4.1-2025-04-14",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": "Hello! How can I assist you today?"},
            "logprobs": null,
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29,
                  "prompt_tokens_details": {"cached_tokens": 0}},
        "system_fingerprint": "fp_44709d6fcb"
    });
    let resp: ChatCompletionResponse = round_trip(&body);
    assert_eq!(resp.object, ChatCompletionResponse::OBJECT);
    assert_eq!(resp.choices[0].finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        resp.usage,
        Some(Usage {
            prompt_tokens: 19,
            completion_tokens: 10,
            total_tokens: 29,
            prompt_tokens_details: Some(PromptTokensDetails { cached_tokens: 0 }),
        })
    );
}

#[test]
fn chat_response_from_openai_with_fields_pagoda_does_not_model_parses() {
    let body = json!({
        "id": "chatcmpl-123", "object": "chat.completion", "created": 1741569952, "model": "gpt-4.1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi", "refusal": null,
            "annotations": []}, "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
        "service_tier": "default"
    });
    let resp: ChatCompletionResponse = serde_json::from_value(body).unwrap();
    assert_eq!(resp.usage.unwrap().total_tokens, 29);
    assert!(resp.choices[0].message.extra.contains_key("refusal"));
    assert_eq!(resp.service_tier.as_deref(), Some("default"));
}

#[test]
fn chat_logprobs_form() {
    let body = json!({
        "id": "chatcmpl-123", "object": "chat.completion", "created": 1702685778, "model": "gpt-4o",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": "Hello!"},
            "logprobs": {"content": [{
                "token": "Hello", "logprob": -0.31725305, "bytes": [72, 101, 108, 108, 111],
                "top_logprobs": [
                    {"token": "Hello", "logprob": -0.31725305, "bytes": [72, 101, 108, 108, 111]},
                    {"token": "Hi", "logprob": -1.3190403, "bytes": [72, 105]}
                ]
            }]},
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": 9, "completion_tokens": 9, "total_tokens": 18}
    });
    let resp: ChatCompletionResponse = round_trip(&body);
    let lp = resp.choices[0]
        .logprobs
        .as_ref()
        .unwrap()
        .content
        .as_ref()
        .unwrap();
    assert_eq!(lp[0].bytes.as_deref(), Some(&b"Hello"[..]));
    assert_eq!(lp[0].top_logprobs[1].token, "Hi");
}

#[test]
fn chat_stream_chunks() {
    let first = json!({"id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190,
        "model": "gpt-4o-mini", "system_fingerprint": "fp_44709d6fcb",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]});
    let last = json!({"id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190,
        "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "length"}]});
    let usage = json!({"id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190,
        "model": "gpt-4o-mini", "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}});
    let tool = json!({"id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190,
        "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
        "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}]},
        "logprobs": null, "finish_reason": null}]});
    let c: ChatCompletionChunk = round_trip(&first);
    assert_eq!(c.choices[0].delta.role, Some(Role::Assistant));
    let c: ChatCompletionChunk = round_trip(&last);
    assert_eq!(c.choices[0].finish_reason, Some(FinishReason::Length));
    let c: ChatCompletionChunk = round_trip(&usage);
    assert_eq!(c.usage, Some(Usage::new(5, 7)));
    let c: ChatCompletionChunk = round_trip(&tool);
    assert_eq!(
        c.choices[0].delta.tool_calls.as_ref().unwrap()[0]
            .id
            .as_deref(),
        Some("call_1")
    );
}

#[test]
fn completion_request_and_response() {
    let req = json!({"model": "gpt-3.5-turbo-instruct", "prompt": "Say this is a test",
        "max_tokens": 7, "temperature": 0.0, "logprobs": 2, "echo": true, "suffix": "!",
        "stop": "\n", "best_of": 1, "n": 1, "stream": false, "presence_penalty": 0.5,
        "frequency_penalty": 0.5, "ignore_eos": true, "stop_token_ids": [2]});
    let r: CompletionRequest = round_trip(&req);
    assert_eq!(r.prompt, Prompt::Text("Say this is a test".into()));
    assert_eq!(r.logprobs, Some(2));
    assert_eq!(r.stop, Some(Stop::One("\n".into())));

    let resp = json!({
        "id": "cmpl-uqkvlQyYK7bGYrRHQ0eXlWi7", "object": "text_completion", "created": 1589478378,
        "model": "gpt-3.5-turbo-instruct", "system_fingerprint": "fp_44709d6fcb",
        "choices": [{"text": "\n\nThis is indeed a test", "index": 0,
            "logprobs": {"tokens": ["\n\n", "This"], "token_logprobs": [null, -0.25],
                "top_logprobs": [null, {"This": -0.25, "It": -1.75}], "text_offset": [18, 20]},
            "finish_reason": "length"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
    });
    let r: CompletionResponse = round_trip(&resp);
    let lp = r.choices[0].logprobs.as_ref().unwrap();
    assert_eq!(lp.token_logprobs, vec![None, Some(-0.25)]);
    // Key order of top_logprobs survives (most likely first), in both directions.
    let top = lp.top_logprobs[1].as_ref().unwrap();
    assert_eq!(
        top.0,
        vec![("This".to_owned(), -0.25), ("It".to_owned(), -1.75)]
    );
    let text = serde_json::to_string(top).unwrap();
    assert_eq!(text, r#"{"This":-0.25,"It":-1.75}"#);

    let chunk = json!({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
        "choices": [{"text": " test", "index": 0, "logprobs": null, "finish_reason": null, "stop_reason": null}]});
    let parsed: CompletionStreamChunk = serde_json::from_value(chunk).unwrap();
    assert_eq!(parsed.choices[0].text, " test");
    let vllm_stop = json!({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
        "choices": [{"text": "", "index": 0, "logprobs": null, "finish_reason": "stop", "stop_reason": 2}]});
    let c: CompletionStreamChunk = round_trip(&vllm_stop);
    assert_eq!(c.choices[0].stop_reason, Some(StopReason::Token(2)));
}

#[test]
fn prompt_variants() {
    let cases = [
        (json!("hi"), Prompt::Text("hi".into())),
        (
            json!(["a", "b"]),
            Prompt::Texts(vec!["a".into(), "b".into()]),
        ),
        (json!([1, 2, 3]), Prompt::Tokens(vec![1, 2, 3])),
        (
            json!([[1, 2], [3]]),
            Prompt::TokenBatches(vec![vec![1, 2], vec![3]]),
        ),
        (json!([]), Prompt::Texts(vec![])),
    ];
    for (value, expected) in cases {
        let parsed: Prompt = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(parsed, expected, "{value}");
        assert_eq!(serde_json::to_value(&parsed).unwrap(), value);
    }
    for bad in [json!(5), json!([1, "a"]), json!([-1]), json!({"text": "x"})] {
        assert!(
            serde_json::from_value::<Prompt>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn models_tokenize_and_errors() {
    let list = json!({"object": "list", "data": [
        {"id": "SmolLM2-135M-Instruct", "object": "model", "created": 1686935002, "owned_by": "pagoda", "max_model_len": 8192}
    ]});
    let l: ModelList = round_trip(&list);
    assert_eq!(
        l,
        ModelList::new(vec![ModelCard {
            max_model_len: Some(8192),
            ..ModelCard::new("SmolLM2-135M-Instruct", 1686935002, "pagoda")
        }])
    );

    let t: TokenizeRequest =
        round_trip(&json!({"prompt": "Hello world", "add_special_tokens": false}));
    assert_eq!(t.prompt.as_deref(), Some("Hello world"));
    let t: TokenizeResponse =
        round_trip(&json!({"count": 2, "max_model_len": 8192, "tokens": [19556, 905]}));
    assert_eq!(t.tokens.len() as u32, t.count);
    let _: DetokenizeRequest = round_trip(&json!({"tokens": [19556, 905]}));
    let _: DetokenizeResponse = round_trip(&json!({"prompt": "Hello world"}));

    let e = ErrorResponse::unknown_parameter("temprature");
    assert_eq!(
        serde_json::to_value(&e).unwrap(),
        json!({"error": {
        "message": "Unrecognized request argument supplied: temprature",
        "type": "invalid_request_error", "param": "temprature", "code": "unknown_parameter"}})
    );
    let e = ErrorResponse::server_error("boom");
    assert_eq!(
        serde_json::to_value(&e).unwrap(),
        json!({"error": {"message": "boom", "type": "server_error", "param": null, "code": null}})
    );
    // vLLM sends the status as a numeric code.
    let v: ErrorResponse = serde_json::from_value(json!({"error": {"message": "m",
        "type": "BadRequestError", "param": null, "code": 400}}))
    .unwrap();
    assert_eq!(v.error.code.as_deref(), Some("400"));
}
