//! The Ollama client parsed against response bodies from Ollama's published API documentation (docs/api.md of
//! github.com/ollama/ollama at 01e52d24bc00defcd9bcc6d995b11df0f08bc6f1; see testdata/ollama/README.md). No Ollama
//! server can be installed here, so these bodies are the ground truth the client is held to.

use serde_json::Value;

use super::api::{ollama_ps_entry, ollama_show_summary, LineEvent, StreamState};
use crate::run::format::record::Api;

const CHUNK: &str = include_str!("testdata/ollama/generate-stream-chunk.json");
const FINAL: &str = include_str!("testdata/ollama/generate-stream-final.json");
const NO_STREAM: &str = include_str!("testdata/ollama/generate-no-stream.json");
const SUFFIX: &str = include_str!("testdata/ollama/generate-suffix-done-reason.json");
const PS: &str = include_str!("testdata/ollama/ps.json");
const VERSION: &str = include_str!("testdata/ollama/version.json");
const SHOW: &str = include_str!("testdata/ollama/show.json");

/// The documentation pretty-prints each streamed object; on the wire each is one NDJSON line. Re-serialising
/// with serde_json keeps every value and only removes the layout whitespace.
fn as_ndjson_line(pretty: &str) -> String {
    serde_json::to_string(&serde_json::from_str::<Value>(pretty).unwrap()).unwrap()
}

#[test]
fn streamed_generate_chunk_then_final_chunk() {
    let mut s = StreamState::new(Api::Ollama);
    assert_eq!(s.feed(&as_ndjson_line(CHUNK)).unwrap(), LineEvent::Token);
    assert!(!s.is_final());
    assert_eq!(s.feed(&as_ndjson_line(FINAL)).unwrap(), LineEvent::Final);
    assert!(s.is_final());
    let t = &s.timings;
    // Durations are integer nanoseconds (docs: "All durations are returned in nanoseconds").
    assert_eq!(t.total_ms, Some(10706.818083));
    assert_eq!(t.load_ms, Some(6338.219291));
    assert_eq!(t.prompt_ms, Some(130.079));
    assert_eq!(t.decode_ms, Some(4232.71));
    assert_eq!((t.prompt_n, t.decode_n, t.cache_n), (Some(26), Some(259), None));
    assert_eq!(s.response_chars, 3);
    assert_eq!(s.token_chunks, 1);
    // The docs' own rate: eval_count / eval_duration * 10^9.
    let tps = crate::run::format::record::tokens_per_second(t.decode_n, t.decode_ms).unwrap();
    assert!((tps - 259.0 / 4232710000.0 * 1e9).abs() < 1e-9);
}

#[test]
fn non_streamed_generate_body_as_printed() {
    let mut s = StreamState::new(Api::Ollama);
    assert_eq!(s.feed_whole(NO_STREAM.as_bytes()).unwrap(), LineEvent::Final);
    assert_eq!(s.response_chars, "The sky is blue because it is the color of the sky.".len() as u64);
    assert_eq!(s.timings.total_ms, Some(5043.500667));
    assert_eq!(s.timings.decode_n, Some(290));
    assert_eq!(s.timings.stop_reason, None, "this example has no done_reason");
}

#[test]
fn the_suffix_example_is_not_json_as_printed_and_is_rejected_as_such() {
    // `"context": [...]` is an ellipsis in the documentation, not JSON; a server sending it would be broken, and
    // the client must say so rather than guess.
    let mut s = StreamState::new(Api::Ollama);
    let err = s.feed_whole(SUFFIX.as_bytes()).unwrap_err();
    assert!(err.contains("not JSON"), "{err}");
    // With the ellipsis replaced by a real array the body parses, with its done_reason.
    let fixed = SUFFIX.replace("[...]", "[1, 2, 3]");
    let mut s = StreamState::new(Api::Ollama);
    assert_eq!(s.feed_whole(fixed.as_bytes()).unwrap(), LineEvent::Final);
    assert_eq!(s.timings.stop_reason.as_deref(), Some("stop"));
    assert_eq!(s.timings.prompt_n, Some(17));
}

#[test]
fn api_ps_gives_size_vram_and_the_fraction_on_the_gpu() {
    let ps: Value = serde_json::from_str(PS).unwrap();
    let e = ollama_ps_entry(&ps, "mistral").expect("an untagged name matches :latest");
    assert_eq!(e["size"], 5137025024u64);
    assert_eq!(e["size_vram"], 5137025024u64);
    assert_eq!(e["vram_fraction"], 1.0);
    assert_eq!(e["quantization_level"], "Q4_0");
    assert!(ollama_ps_entry(&ps, "llama3.2").is_none());
}

#[test]
fn api_version() {
    let v: Value = serde_json::from_str(VERSION).unwrap();
    assert_eq!(v["version"], "0.5.1");
}

#[test]
fn api_show_with_the_documentations_comments_removed() {
    // The example annotates three arrays with `// populates if verbose=true`, which JSON does not allow; strip
    // those annotations (everything from `//` outside strings to the end of the line) and parse the rest.
    let stripped: String = SHOW
        .lines()
        .map(|l| match l.find("  //") {
            Some(i) => l[..i].trim_end(),
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(serde_json::from_str::<Value>(SHOW).is_err(), "the printed example is not strict JSON");
    let show: Value = serde_json::from_str(&stripped).unwrap();
    let s = ollama_show_summary(&show);
    assert_eq!(s["details"]["quantization_level"], "Q4_0");
    assert_eq!(s["general.architecture"], "llama");
    assert_eq!(s["general.parameter_count"], 8030261248u64);
    assert_eq!(s["llama.block_count"], 32);
    assert_eq!(s["llama.context_length"], 8192);
    assert!(!s.contains_key("tokenizer.ggml.tokens"));
}
