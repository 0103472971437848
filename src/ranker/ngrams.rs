//! Optional extra ranker input: hashed n-grams of syntax-node kinds.
//!
//! The CUDA source is parsed with tree-sitter-cuda; every node contributes the vertical
//! n-grams that end at it — `parent>node` (bigram) and `grandparent>parent>node` (trigram),
//! over all node kinds, named or anonymous (`__global__`, `__syncthreads` tokens included).
//! Each n-gram is hashed (FNV-1a over the kind names, so buckets do not change with the
//! grammar's numeric kind ids) into `buckets` counters, and the vector is divided by its sum,
//! so it describes the mix of constructs independent of the kernel's length.

use tree_sitter::{Node, Parser, Tree};

use crate::analysis::SourceTree;

use super::error::{RankerError, Result};

/// Feature names for the n-gram buckets (`syntax_ngram_000`, ...), to append to the
/// structural feature names when [`syntax_ngrams`] vectors are appended to the features.
pub fn syntax_ngram_names(buckets: usize) -> Vec<String> {
    (0..buckets)
        .map(|i| format!("syntax_ngram_{i:03}"))
        .collect()
}

/// Hashed, L1-normalised bigram and trigram counts of the syntax-node kinds of `source`
/// (CUDA C++), in `buckets` dimensions. An empty source gives all zeros; source with syntax
/// errors still counts (tree-sitter recovers, with `ERROR` nodes). `buckets == 0` gives an
/// empty vector.
///
/// ```
/// # fn main() -> Result<(), cudaperf::ranker::RankerError> {
/// let src = b"__global__ void k(float* x) { x[threadIdx.x] = 0.f; __syncthreads(); }";
/// let v = cudaperf::ranker::syntax_ngrams(src, 64)?;
/// assert_eq!(v.len(), 64);
/// assert!((v.iter().sum::<f32>() - 1.0).abs() < 1e-5);
/// # Ok(()) }
/// ```
pub fn syntax_ngrams(source: &[u8], buckets: usize) -> Result<Vec<f32>> {
    if buckets == 0 || source.is_empty() {
        return Ok(vec![0.0; buckets]);
    }
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_cuda::LANGUAGE.into())
        .map_err(|e| RankerError::Syntax {
            reason: format!("cannot load the tree-sitter-cuda grammar: {e}"),
        })?;
    let tree = parser
        .parse(source, None)
        .ok_or_else(|| RankerError::Syntax {
            reason: "tree-sitter returned no tree".into(),
        })?;
    Ok(ngrams_of_tree(&tree, buckets))
}

/// [`syntax_ngrams`] of a source the pipeline already parsed (no second parse).
pub fn syntax_ngrams_of(source: &SourceTree, buckets: usize) -> Vec<f32> {
    if buckets == 0 || source.text().is_empty() {
        return vec![0.0; buckets];
    }
    ngrams_of_tree(source.tree(), buckets)
}

fn ngrams_of_tree(tree: &Tree, buckets: usize) -> Vec<f32> {
    let mut counts = vec![0f64; buckets];
    // Iterative walk (no recursion: deeply nested generated code cannot overflow the stack),
    // carrying the hashes of the parent and grandparent kinds.
    let mut stack: Vec<(Node, Option<u64>, Option<u64>)> = vec![(tree.root_node(), None, None)];
    let mut total = 0f64;
    while let Some((node, parent, grandparent)) = stack.pop() {
        let kind = fnv1a(FNV_OFFSET, node.kind().as_bytes());
        if let Some(p) = parent {
            counts[bucket(mix(p, kind), buckets)] += 1.0;
            total += 1.0;
            if let Some(g) = grandparent {
                counts[bucket(mix(mix(g, p), kind), buckets)] += 1.0;
                total += 1.0;
            }
        }
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            stack.push((child, Some(kind), parent));
        }
    }
    if total > 0.0 {
        for c in &mut counts {
            *c /= total;
        }
    }
    counts.into_iter().map(|c| c as f32).collect()
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// Order-sensitive combination of two hashes (so `a>b` and `b>a` differ).
fn mix(a: u64, b: u64) -> u64 {
    fnv1a(a.rotate_left(17) ^ FNV_OFFSET, &b.to_le_bytes())
}

fn bucket(h: u64, buckets: usize) -> usize {
    (h % buckets as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn different_constructs_give_different_vectors() {
        let a = syntax_ngrams(b"__global__ void k(float* x){ x[threadIdx.x] = 1.f; }", 32).unwrap();
        let b = syntax_ngrams(
            b"__global__ void k(float* x){ __shared__ float s[32]; s[threadIdx.x]=x[0]; __syncthreads(); for(int i=0;i<4;i++) x[i]+=s[i]; }",
            32,
        )
        .unwrap();
        assert_ne!(a, b);
        assert!(a.iter().all(|v| v.is_finite() && *v >= 0.0));
        assert_eq!(syntax_ngrams(b"", 8).unwrap(), vec![0.0; 8]);
        assert!(syntax_ngrams(b"int x", 0).unwrap().is_empty());
        // Broken code still yields a distribution rather than an error.
        let broken = syntax_ngrams(b"__global__ void k( {{{", 16).unwrap();
        assert!((broken.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }
}
