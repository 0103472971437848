//! Picking the code out of an LLM completion: its fenced blocks and the one that holds the
//! kernel.

use super::{CandidateError, MAX_COMPLETION_BYTES};

/// Kinds of fence info strings accepted as CUDA code.
const CODE_FENCES: [&str; 7] = ["cuda", "cu", "cpp", "c++", "cxx", "c", ""];

/// Extracts fenced code blocks (info string, body) from markdown-ish text. An unclosed
/// final fence runs to the end of the text (completions get truncated).
pub fn code_blocks(text: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("```") {
            match current.take() {
                Some(block) => blocks.push(block),
                None => current = Some((rest.trim().to_ascii_lowercase(), String::new())),
            }
            continue;
        }
        if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    if let Some(block) = current {
        blocks.push(block);
    }
    blocks
}

/// Picks the code block of a completion (see [`Candidate::from_completion`](super::Candidate::from_completion)). Completions
/// over [`MAX_COMPLETION_BYTES`] are refused before they are scanned.
pub fn extract_code(text: &str) -> Result<String, CandidateError> {
    if text.len() > MAX_COMPLETION_BYTES {
        return Err(CandidateError::TooLarge {
            what: "completion",
            bytes: text.len(),
            limit: MAX_COMPLETION_BYTES,
        });
    }
    let blocks: Vec<(String, String)> = code_blocks(text)
        .into_iter()
        .filter(|(info, _)| CODE_FENCES.contains(&info.split_whitespace().next().unwrap_or("")))
        .collect();
    if let Some((_, body)) = blocks.iter().rev().find(|(_, b)| b.contains("__global__")) {
        return Ok(body.clone());
    }
    blocks
        .into_iter()
        .max_by_key(|(_, b)| b.len())
        .map(|(_, b)| b)
        .filter(|b| !b.trim().is_empty())
        .ok_or(CandidateError::NoCodeBlock)
}
