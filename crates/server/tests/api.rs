//! The request surface against one shared real server: streamed == non-streamed, exact usage,
//! finish reasons, logprobs, n, echo, and every 4xx of the error surface with its shape.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::OnceLock;

use common::{MODEL, TestServer, chunks, client, error_of, post, post_stream};
use serde_json::{Value, json};

pub fn server() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| {
        let config = pagoda_server::ServerConfig {
            metrics_compat: pagoda_server::MetricsCompat::Vllm,
            ..common::config()
        };
        TestServer::start(common::small_setup(), config)
    })
}

fn completion_text(events: &[String]) -> (String, Option<String>) {
    let mut text = String::new();
    let mut finish = None;
    for c in chunks(events) {
        for ch in c["choices"].as_array().unwrap() {
            text.push_str(ch["text"].as_str().unwrap());
            if let Some(f) = ch["finish_reason"].as_str() {
                finish = Some(f.to_owned());
            }
        }
    }
    (text, finish)
}

#[tokio::test]
async fn streamed_completion_equals_non_streamed() {
    let s = server();
    let c = client();
    let body = json!({"model": MODEL, "prompt": "The capital of France is", "max_tokens": 12, "temperature": 0});
    let (st, full) = post(&c, &s.url("/v1/completions"), &body).await;
    assert_eq!(st, 200, "{full}");
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let (st, events) = post_stream(&c, &s.url("/v1/completions"), &sbody).await;
    assert_eq!(st, 200);
    let (text, finish) = completion_text(&events);
    assert_eq!(text, full["choices"][0]["text"].as_str().unwrap());
    assert_eq!(
        finish.as_deref(),
        full["choices"][0]["finish_reason"].as_str()
    );
    assert!(!text.is_empty());
}

#[tokio::test]
async fn streamed_chat_equals_non_streamed_and_follows_the_chunk_format() {
    let s = server();
    let c = client();
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "Name three colors."}],
        "max_tokens": 16, "temperature": 0});
    let (st, full) = post(&c, &s.url("/v1/chat/completions"), &body).await;
    assert_eq!(st, 200, "{full}");
    assert_eq!(full["object"], "chat.completion");
    assert!(full["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(full["created"].as_u64().unwrap() > 0);
    assert_eq!(full["model"], MODEL);
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    sbody["stream_options"] = json!({"include_usage": true});
    let (_, events) = post_stream(&c, &s.url("/v1/chat/completions"), &sbody).await;
    let cs = chunks(&events);
    // Role first, then content deltas, then one chunk with finish_reason, then usage.
    assert_eq!(cs[0]["choices"][0]["delta"]["role"], "assistant");
    let last = cs.last().unwrap();
    assert_eq!(last["choices"].as_array().unwrap().len(), 0);
    for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(last["usage"][k], full["usage"][k], "{k}");
    }
    // The second request reuses the first one's full prompt blocks.
    assert!(
        last["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    let fin = &cs[cs.len() - 2];
    assert_eq!(
        fin["choices"][0]["finish_reason"],
        full["choices"][0]["finish_reason"]
    );
    let text: String = cs
        .iter()
        .filter_map(|c| {
            c["choices"].get(0)?["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(
        text,
        full["choices"][0]["message"]["content"].as_str().unwrap()
    );
    assert!(
        cs.iter()
            .all(|c| c["object"] == "chat.completion.chunk" && c["id"] == cs[0]["id"])
    );
}

#[tokio::test]
async fn usage_counts_are_exact() {
    let s = server();
    let c = client();
    let prompt = "Counting tokens exactly matters because";
    let (_, tok) = post(&c, &s.url("/tokenize"), &json!({"prompt": prompt})).await;
    let n_prompt = tok["count"].as_u64().unwrap();
    assert_eq!(n_prompt as usize, tok["tokens"].as_array().unwrap().len());
    let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 7, "temperature": 0, "ignore_eos": true});
    let (st, r) = post(&c, &s.url("/v1/completions"), &body).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["usage"]["prompt_tokens"], n_prompt);
    assert_eq!(r["usage"]["completion_tokens"], 7);
    assert_eq!(r["usage"]["total_tokens"], n_prompt + 7);
    assert_eq!(r["choices"][0]["finish_reason"], "length");
    // Token-id prompts count their ids; two prompts with n=2 give 4 choices, prompt-major.
    let ids = tok["tokens"].clone();
    let body = json!({"model": MODEL, "prompt": [ids, [1, 2, 3]], "n": 2, "max_tokens": 3,
        "ignore_eos": true, "temperature": 0.8, "seed": 5});
    let (st, r) = post(&c, &s.url("/v1/completions"), &body).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["usage"]["prompt_tokens"], n_prompt + 3);
    assert_eq!(r["usage"]["completion_tokens"], 12);
    let idx: Vec<u64> = r["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(idx, [0, 1, 2, 3]);
    // Chat: the prompt count is the templated conversation's, as /tokenize renders it.
    let msgs = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}]);
    let (_, tok) = post(&c, &s.url("/tokenize"), &json!({"messages": msgs})).await;
    let body =
        json!({"model": MODEL, "messages": msgs, "max_completion_tokens": 4, "ignore_eos": true});
    let (st, r) = post(&c, &s.url("/v1/chat/completions"), &body).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["usage"]["prompt_tokens"], tok["count"]);
    assert_eq!(r["usage"]["completion_tokens"], 4);
    // With tools (vLLM's /tokenize field): the tools are rendered as the chat request renders
    // them, so the counts still agree.
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "description": "Current weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let (st, with_tools) = post(
        &c,
        &s.url("/tokenize"),
        &json!({"messages": msgs, "tools": tools}),
    )
    .await;
    assert_eq!(st, 200, "{with_tools}");
    assert!(with_tools["count"].as_u64() > tok["count"].as_u64());
    let body = json!({"model": MODEL, "messages": msgs, "tools": tools,
                      "max_completion_tokens": 1});
    let (st, r) = post(&c, &s.url("/v1/chat/completions"), &body).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["usage"]["prompt_tokens"], with_tools["count"]);
    let (st, v) = post(
        &c,
        &s.url("/tokenize"),
        &json!({"prompt": "Hi", "tools": tools}),
    )
    .await;
    assert_eq!((st, error_of(&v)["param"].clone()), (400, json!("tools")));
}

#[tokio::test]
async fn finish_reasons_for_length_stop_string_and_eos() {
    let s = server();
    let c = client();
    let url = s.url("/v1/completions");
    let base = json!({"model": MODEL, "prompt": "One, two, three, four, five,", "max_tokens": 16, "temperature": 0});
    let (_, r) = post(&c, &url, &base).await;
    let text = r["choices"][0]["text"].as_str().unwrap().to_owned();
    assert_eq!(r["choices"][0]["finish_reason"], "length", "{r}");
    // A stop string from the middle of the greedy text: output ends right before it.
    let words: Vec<&str> = text.split_whitespace().collect();
    assert!(words.len() >= 3, "{text:?}");
    let stop = words[2];
    let at = text.find(stop).unwrap();
    let mut body = base.clone();
    body["stop"] = json!([stop, "never-appears-xyz"]);
    let (_, r) = post(&c, &url, &body).await;
    assert_eq!(r["choices"][0]["finish_reason"], "stop", "{r}");
    assert_eq!(r["choices"][0]["stop_reason"], stop);
    assert_eq!(r["choices"][0]["text"].as_str().unwrap(), &text[..at]);
    assert!(r["usage"]["completion_tokens"].as_u64().unwrap() < 16);
    // The same through the stream: the stop text never reaches the client.
    body["stream"] = json!(true);
    let (_, events) = post_stream(&c, &url, &body).await;
    let (streamed, finish) = completion_text(&events);
    assert_eq!(streamed, &text[..at]);
    assert_eq!(finish.as_deref(), Some("stop"));
    // EOS: a chat answer that ends on its own, well before max_tokens.
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 200, "temperature": 0});
    let (_, r) = post(&c, &s.url("/v1/chat/completions"), &body).await;
    assert_eq!(r["choices"][0]["finish_reason"], "stop", "{r}");
    assert!(r["choices"][0]["stop_reason"].is_null(), "{r}");
    assert!(r["usage"]["completion_tokens"].as_u64().unwrap() < 200);
}

#[tokio::test]
async fn logprobs_in_both_forms_and_echo() {
    let s = server();
    let c = client();
    let body = json!({"model": MODEL, "prompt": "Hello world", "max_tokens": 4, "logprobs": 3,
        "temperature": 0, "ignore_eos": true});
    let (st, r) = post(&c, &s.url("/v1/completions"), &body).await;
    assert_eq!(st, 200, "{r}");
    let lp = &r["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 4);
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), 4);
    assert_eq!(lp["text_offset"].as_array().unwrap().len(), 4);
    for (top, l) in lp["top_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .zip(lp["token_logprobs"].as_array().unwrap())
    {
        let top = top.as_object().unwrap();
        assert!(!top.is_empty() && top.len() <= 3);
        assert!(l.as_f64().unwrap() <= 0.0);
        // Greedy: the chosen token is the most likely one.
        let best = top
            .values()
            .map(|v| v.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert!((best - l.as_f64().unwrap()).abs() < 1e-4);
    }
    let joined: String = lp["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(joined, r["choices"][0]["text"].as_str().unwrap());
    // echo + logprobs: the prompt's tokens first, the first one without a logprob.
    let mut eb = body.clone();
    eb["echo"] = json!(true);
    let (st, e) = post(&c, &s.url("/v1/completions"), &eb).await;
    assert_eq!(st, 200, "{e}");
    let etext = e["choices"][0]["text"].as_str().unwrap();
    assert_eq!(
        etext,
        format!("Hello world{}", r["choices"][0]["text"].as_str().unwrap())
    );
    let elp = &e["choices"][0]["logprobs"];
    let n_prompt = e["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    assert_eq!(elp["tokens"].as_array().unwrap().len(), n_prompt + 4);
    assert!(elp["token_logprobs"][0].is_null());
    assert!(elp["token_logprobs"][1].as_f64().unwrap() <= 0.0);
    // Chat form.
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
        "logprobs": true, "top_logprobs": 2, "ignore_eos": true});
    let (st, r) = post(&c, &s.url("/v1/chat/completions"), &body).await;
    assert_eq!(st, 200, "{r}");
    let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 3);
    for t in content {
        assert!(t["token"].is_string() && t["logprob"].as_f64().unwrap() <= 0.0);
        assert!(t["bytes"].is_array());
        assert_eq!(t["top_logprobs"].as_array().unwrap().len(), 2);
    }
}

#[tokio::test]
async fn seeded_sampling_repeats_and_n_choices_differ() {
    let s = server();
    let c = client();
    let body = json!({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 10, "temperature": 1.0,
        "seed": 42, "n": 3, "ignore_eos": true});
    let (_, a) = post(&c, &s.url("/v1/completions"), &body).await;
    let (_, b) = post(&c, &s.url("/v1/completions"), &body).await;
    assert_eq!(a["choices"], b["choices"]);
    let texts: Vec<&str> = a["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts.len(), 3);
    assert!(texts[0] != texts[1] || texts[1] != texts[2], "{texts:?}");
}

#[tokio::test]
async fn models_tokenize_health_and_version() {
    let s = server();
    let c = client();
    let m: Value = c
        .get(s.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], MODEL);
    assert_eq!(m["data"][0]["max_model_len"], 1024);
    let (_, t) = post(&c, &s.url("/tokenize"), &json!({"prompt": "Hello there"})).await;
    let (_, d) = post(&c, &s.url("/detokenize"), &json!({"tokens": t["tokens"]})).await;
    assert_eq!(d["prompt"], "Hello there");
    for p in ["/health", "/ready", "/version"] {
        assert_eq!(c.get(s.url(p)).send().await.unwrap().status(), 200, "{p}");
    }
    let metrics = common::metrics_text(&c, &s.base).await;
    for name in [
        "pagoda:time_to_first_token_seconds_bucket",
        "pagoda:kv_cache_usage_perc",
        "pagoda:num_requests_running",
        "pagoda:prompt_tokens_total",
        "pagoda:prefix_cache_hits_total",
        "pagoda:request_success_total",
        // --metrics-compat vllm: the names the Gateway API Inference Extension and llm-d read.
        "vllm:num_requests_waiting{",
        "vllm:num_requests_running{",
        "vllm:kv_cache_usage_perc{",
        "vllm:gpu_cache_usage_perc{",
        "vllm:time_to_first_token_seconds_bucket",
        "block_size=\"16\"",
    ] {
        assert!(metrics.contains(name), "{name} missing");
    }
    assert!(metrics.contains("vllm:cache_config_info{"));
    assert!(!metrics.contains("vllm:engine_steps_total"));
    // Prometheus wants each family's lines together: every TYPE line names a new family.
    let mut families = std::collections::HashSet::new();
    for line in metrics.lines().filter(|l| l.starts_with("# TYPE ")) {
        let family = line.split(' ').nth(2).unwrap();
        assert!(
            families.insert(family.to_owned()),
            "{family} declared twice"
        );
    }
}

/// Sends `body` to `path` and checks the status and the `param` of the error.
async fn expect_error(path: &str, body: Value, status: u16, param: Option<&str>) -> String {
    let s = server();
    let (st, r) = post(&client(), &s.url(path), &body).await;
    assert_eq!(st, status, "{body} -> {r}");
    let e = error_of(&r);
    assert_eq!(e["param"].as_str(), param, "{body} -> {r}");
    e["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn every_bad_field_is_a_400_naming_it() {
    let cmpl = |extra: Value| {
        let mut b = json!({"model": MODEL, "prompt": "hi", "max_tokens": 2});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let cases = [
        (json!({"temperature": 2.5}), "temperature"),
        (json!({"temperature": "hot"}), "temperature"),
        (json!({"top_p": 0}), "top_p"),
        (json!({"top_k": -2}), "top_k"),
        (json!({"min_p": 1.5}), "min_p"),
        (json!({"n": 0}), "n"),
        (json!({"n": 17}), "n"),
        (json!({"max_tokens": 0}), "max_tokens"),
        (json!({"presence_penalty": 3}), "presence_penalty"),
        (json!({"frequency_penalty": -3}), "frequency_penalty"),
        (json!({"repetition_penalty": 0}), "repetition_penalty"),
        (json!({"logit_bias": {"5": 200}}), "logit_bias"),
        (json!({"logit_bias": {"abc": 1}}), "logit_bias"),
        (json!({"logit_bias": {"99999999": 1}}), "logit_bias"),
        (json!({"logprobs": 21}), "logprobs"),
        (json!({"min_tokens": 5}), "min_tokens"),
        (json!({"stop": ""}), "stop"),
        (json!({"stop": 5}), "stop"),
        (json!({"stop_token_ids": [99999999]}), "stop_token_ids"),
        (
            json!({"stream_options": {"include_usage": true}}),
            "stream_options",
        ),
        (json!({"priority": 3}), "priority"),
        (json!({"suffix": "x"}), "suffix"),
        (json!({"best_of": 3}), "best_of"),
        (json!({"prompt": ""}), "prompt"),
        (json!({"prompt": []}), "prompt"),
        (json!({"prompt": [999999999]}), "prompt"),
        (json!({"prompt": {"a": 1}}), "prompt"),
        (
            json!({"response_format": {"type": "xml"}}),
            "response_format.type",
        ),
        (
            json!({"structured_outputs": {"choice": []}}),
            "structured_outputs.choice",
        ),
        (json!({"bogus_field": 1}), "bogus_field"),
    ];
    for (extra, param) in cases {
        expect_error("/v1/completions", cmpl(extra), 400, Some(param)).await;
    }
    let chat = |extra: Value| {
        let mut b = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let cases = [
        (json!({"top_logprobs": 2}), "top_logprobs"),
        (
            json!({"logprobs": true, "top_logprobs": 21}),
            "top_logprobs",
        ),
        (json!({"max_completion_tokens": 0}), "max_completion_tokens"),
        (json!({"tools": [{"type": "function"}]}), "tools[0]"),
        (json!({"tool_choice": "auto"}), "tool_choice"),
        (json!({"functions": [{"name": "f"}]}), "functions"),
        (
            json!({"structured_outputs": {"regex": "a("}}),
            "structured_outputs",
        ),
        (json!({"messages": []}), "messages"),
        (
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            "messages",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            "messages[0].content[0].type",
        ),
        (
            json!({"messages": [{"role": "user"}]}),
            "messages[0].content",
        ),
        (
            json!({"messages": [{"role": "tool", "content": "42"}]}),
            "messages[0].tool_call_id",
        ),
        (json!({"unknown_knob": true}), "unknown_knob"),
    ];
    for (extra, param) in cases {
        expect_error("/v1/chat/completions", chat(extra), 400, Some(param)).await;
    }
}

#[tokio::test]
async fn malformed_json_unknown_model_unknown_route_and_context_overflow() {
    let s = server();
    let c = client();
    let res = c
        .post(s.url("/v1/completions"))
        .header("content-type", "application/json")
        .body("{\"model\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    error_of(&res.json::<Value>().await.unwrap());
    let msg = expect_error(
        "/v1/completions",
        json!({"model": "gpt-9", "prompt": "x"}),
        404,
        Some("model"),
    )
    .await;
    assert!(msg.contains("gpt-9"));
    let res = c.get(s.url("/v1/nothing-here")).send().await.unwrap();
    assert_eq!(res.status(), 404);
    error_of(&res.json::<Value>().await.unwrap());
    // Context overflow names the prompt length, max_tokens and the limit.
    let (_, tok) = post(&c, &s.url("/tokenize"), &json!({"prompt": "a b c"})).await;
    let n = tok["count"].as_u64().unwrap();
    let msg = expect_error(
        "/v1/completions",
        json!({"model": MODEL, "prompt": "a b c", "max_tokens": 1024}),
        400,
        Some("max_tokens"),
    )
    .await;
    assert!(
        msg.contains("1024") && msg.contains(&format!("{n} tokens")),
        "{msg}"
    );
    let long = "word ".repeat(1100);
    let msg = expect_error(
        "/v1/chat/completions",
        json!({"model": MODEL, "messages": [{"role": "user", "content": long}]}),
        400,
        Some("messages"),
    )
    .await;
    assert!(msg.contains("1024"), "{msg}");
}

/// vLLM's and llama.cpp's smaller request fields: `/tokenize` with `content`,
/// `continue_final_message`, `chat_template_kwargs`, `prompt_logprobs`, `metadata`.
#[tokio::test]
async fn template_options_prompt_logprobs_and_tokenize_content() {
    let s = server();
    let c = client();
    let tok = |body: Value| {
        let c = c.clone();
        let url = s.url("/tokenize");
        async move {
            let (st, v) = post(&c, &url, &body).await;
            assert_eq!(st, 200, "{body} -> {v}");
            v["tokens"].as_array().unwrap().clone()
        }
    };
    // llama.cpp's `content`: the same ids as `prompt` without special tokens.
    let by_content = tok(json!({"content": "Hello there"})).await;
    let by_prompt = tok(json!({"prompt": "Hello there", "add_special_tokens": false})).await;
    assert_eq!(by_content, by_prompt);
    // llama.cpp's `add_special`, and both names of the text at once (a client written for both
    // servers sends them).
    let with_special = tok(json!({"prompt": "Hello there"})).await;
    let by_content_special = tok(json!({"content": "Hello there", "add_special": true})).await;
    assert_eq!(by_content_special, with_special);
    let both = json!({"prompt": "Hello there", "content": "Hello there", "add_special": false});
    assert_eq!(tok(both).await, by_content);
    expect_error(
        "/tokenize",
        json!({"content": "a", "add_special": true, "add_special_tokens": false}),
        400,
        Some("add_special"),
    )
    .await;
    expect_error(
        "/tokenize",
        json!({"content": "a", "prompt": "b"}),
        400,
        Some("content"),
    )
    .await;

    // continue_final_message: the prompt ends with the assistant's text, no end of turn.
    let msgs = json!([{"role": "user", "content": "Say a color."},
                      {"role": "assistant", "content": "The sky is"}]);
    let open = tok(json!({"messages": msgs, "continue_final_message": true})).await;
    let closed = tok(json!({"messages": msgs, "add_generation_prompt": false})).await;
    assert!(open.len() < closed.len(), "{open:?} vs {closed:?}");
    assert_eq!(
        open[..],
        closed[..open.len()],
        "a prefix of the closed turn"
    );
    let (st, text) = post(&c, &s.url("/detokenize"), &json!({"tokens": open})).await;
    assert_eq!(st, 200);
    assert!(
        text["prompt"].as_str().unwrap().ends_with("The sky is"),
        "{text}"
    );
    let body = json!({"model": MODEL, "messages": msgs, "continue_final_message": true,
                      "add_generation_prompt": false, "max_tokens": 4, "temperature": 0});
    let (st, v) = post(&c, &s.url("/v1/chat/completions"), &body).await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = post(
        &c,
        &s.url("/tokenize"),
        &json!({"messages": msgs, "continue_final_message": true, "add_generation_prompt": true}),
    )
    .await;
    assert_eq!(
        (st, error_of(&v)["param"].clone()),
        (400, json!("continue_final_message"))
    );

    // chat_template_kwargs reach the template (SmolLM2's ignores unknown ones), but cannot
    // replace what the request sets.
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                      "chat_template_kwargs": {"enable_thinking": false}, "max_tokens": 2});
    let (st, v) = post(&c, &s.url("/v1/chat/completions"), &body).await;
    assert_eq!(st, 200, "{v}");
    let mut bad = body.clone();
    bad["chat_template_kwargs"] = json!({"messages": []});
    expect_error(
        "/v1/chat/completions",
        bad,
        400,
        Some("chat_template_kwargs.messages"),
    )
    .await;

    // prompt_logprobs: null for the first prompt token, then the prompt's own token at each
    // position with its rank, plus up to k alternatives.
    let ask = json!([{"role": "user", "content": "Name a fruit."}]);
    let ids = tok(json!({"messages": ask})).await;
    let body = json!({"model": MODEL, "messages": ask, "prompt_logprobs": 2, "max_tokens": 2,
                      "metadata": {"suite": "api"}, "user": "tester"});
    let (st, v) = post(&c, &s.url("/v1/chat/completions"), &body).await;
    assert_eq!(st, 200, "{v}");
    let plp = v["prompt_logprobs"].as_array().unwrap();
    assert_eq!(plp.len(), ids.len());
    assert!(plp[0].is_null());
    for (pos, entry) in plp.iter().enumerate().skip(1) {
        let map = entry.as_object().unwrap();
        let own = &map[&ids[pos].to_string()];
        assert!(own["logprob"].as_f64().unwrap() <= 0.0, "{own}");
        assert!(own["rank"].as_u64().unwrap() >= 1, "{own}");
        assert!(own["decoded_token"].is_string());
        assert!((1..=3).contains(&map.len()), "{entry}");
    }
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    expect_error(
        "/v1/chat/completions",
        streamed,
        400,
        Some("prompt_logprobs"),
    )
    .await;
    let mut bad = body.clone();
    bad["metadata"] = json!({"n": 1});
    expect_error("/v1/chat/completions", bad, 400, Some("metadata")).await;
}

/// vLLM's `prompt_logprobs` on completions: per choice, `null` first, then each prompt token's
/// entry; streamed on the first chunk; the same when asked through the stream.
#[tokio::test]
async fn completions_prompt_logprobs() {
    let s = server();
    let c = client();
    let prompt = "The capital of France is";
    let (_, t) = post(&c, &s.url("/tokenize"), &json!({"prompt": prompt})).await;
    let ids = t["tokens"].as_array().unwrap().clone();
    let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 2, "temperature": 0,
                      "prompt_logprobs": 1});
    let (st, v) = post(&c, &s.url("/v1/completions"), &body).await;
    assert_eq!(st, 200, "{v}");
    let plp = v["choices"][0]["prompt_logprobs"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(plp.len(), ids.len(), "{v}");
    assert!(plp[0].is_null());
    for (pos, e) in plp.iter().enumerate().skip(1) {
        assert!(e.get(ids[pos].to_string()).is_some(), "{e}");
    }
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let (_, events) = post_stream(&c, &s.url("/v1/completions"), &sbody).await;
    let first = chunks(&events)
        .into_iter()
        .find_map(|ch| ch["choices"][0].get("prompt_logprobs").cloned())
        .unwrap();
    assert_eq!(first.as_array().unwrap(), &plp, "streamed prompt_logprobs");
    let mut both = body.clone();
    both["echo"] = json!(true);
    both["logprobs"] = json!(2);
    expect_error("/v1/completions", both, 400, Some("prompt_logprobs")).await;
}
