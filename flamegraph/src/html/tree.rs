//! The call tree the HTML report's flamegraph and function tables are
//! drawn from: merged stacks folded into one top-down tree, sent to the
//! page compactly (a string table of frame names, each node's parent and
//! name as indices, and the five weights' self values of the nodes that
//! have any), and pruned when a profile has more nodes than a browser
//! lays out quickly.
//!
//! The page builds the bottom-up (inverted) tree, the totals and the
//! callers and callees from this one tree, so that every view agrees.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::stacks::{StackSet, Values, Weight};

/// Above this many nodes the tree is pruned ([`FlameTree::build`]): about
/// 2 MB of JSON at the depth of real programs, which Chromium parses and
/// turns into objects in well under a second on a 2-core machine.
pub const MAX_NODES: usize = 60_000;

/// The fractions of a weight's total tried in turn, smallest first, as
/// the threshold below which a node is pruned: the first that brings the
/// tree under [`MAX_NODES`] is used.
const THRESHOLDS: [f64; 5] = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2];

/// The name of the node that stands for a parent's pruned children.
pub const PRUNED_NAME: &str = "[below threshold]";

/// The call tree, as the page reads it.
#[derive(Debug, Default, Serialize)]
pub struct FlameTree {
    /// Frame names, each once; nodes name theirs by index.
    pub names: Vec<String>,
    /// Per node, its name's index in `names`. Node 0 is the root (all
    /// stacks); nodes are in depth-first order, so a parent comes before
    /// its children.
    pub name: Vec<u32>,
    /// Per node, its parent's index (the root's is -1).
    pub parent: Vec<i64>,
    /// The nodes with a non-zero self value: `[node, count, bytes, time,
    /// peak, leaked, temporary]` (the weights in [`Weight::ALL`]'s order).
    pub selfs: Vec<[u64; 7]>,
    /// The nodes whose own stacks freed or kept blocks: `[node, freed in
    /// each of the 9 decades of lifetime..., the sum of those lifetimes in
    /// TSC ticks, blocks never freed]` (all zero when lifetimes were not
    /// recorded).
    pub lifetimes: Vec<[u64; 12]>,
    /// What pruning left out, if the tree was pruned.
    pub pruned: Option<Pruned>,
}

/// What [`FlameTree::build`] pruned.
#[derive(Debug, Serialize, PartialEq)]
pub struct Pruned {
    /// A node was kept if, for some weight, its total reached this share
    /// of that weight's total.
    pub threshold: f64,
    /// Nodes before pruning.
    pub nodes_before: usize,
    /// Nodes after (the `[below threshold]` ones included).
    pub nodes_after: usize,
}

/// A node while the tree is built.
struct Node {
    name: u32,
    children: FxHashMap<u32, usize>,
    own: Values,
    total: Values,
}

impl FlameTree {
    /// The tree of `set`'s merged stacks, root first: a program's stacks
    /// under a `[program]` frame when the set is rooted by program.
    pub fn build(set: &StackSet<'_>) -> FlameTree {
        let paths = set.merged(Weight::Bytes).into_iter().map(|s| {
            let path: Vec<String> = s
                .program
                .iter()
                .map(|p| format!("[{p}]"))
                .chain(s.frames.iter().rev().map(|f| {
                    if f.inlined {
                        format!("{} (inlined)", f.function)
                    } else {
                        f.function.clone()
                    }
                }))
                .collect();
            (path, s.values)
        });
        FlameTree::from_paths(paths, MAX_NODES)
    }

    /// The tree of stacks given root first with their figures, pruned
    /// when it has more than `max_nodes` nodes.
    pub fn from_paths(
        paths: impl IntoIterator<Item = (Vec<String>, Values)>,
        max_nodes: usize,
    ) -> FlameTree {
        let mut names: Vec<String> = vec!["all".to_string()];
        let mut index: FxHashMap<String, u32> = FxHashMap::default();
        index.insert(names[0].clone(), 0);
        let mut intern = |s: String| -> u32 {
            if let Some(&i) = index.get(&s) {
                return i;
            }
            names.push(s.clone());
            index.insert(s, (names.len() - 1) as u32);
            (names.len() - 1) as u32
        };
        let mut nodes = vec![Node {
            name: 0,
            children: FxHashMap::default(),
            own: Values::default(),
            total: Values::default(),
        }];
        for (path, values) in paths {
            let mut at = 0;
            nodes[0].total.add(&values);
            for name in path {
                let name = intern(name);
                at = match nodes[at].children.get(&name) {
                    Some(&child) => child,
                    None => {
                        nodes.push(Node {
                            name,
                            children: FxHashMap::default(),
                            own: Values::default(),
                            total: Values::default(),
                        });
                        let child = nodes.len() - 1;
                        nodes[at].children.insert(name, child);
                        child
                    }
                };
                nodes[at].total.add(&values);
            }
            nodes[at].own.add(&values);
        }
        let total = nodes[0].total;
        let nodes_before = nodes.len();
        let mut pruned = None;
        let mut keep: Vec<bool> = vec![true; nodes.len()];
        if nodes.len() > max_nodes {
            for &threshold in &THRESHOLDS {
                keep = nodes
                    .iter()
                    .map(|n| {
                        Weight::ALL.iter().any(|&w| {
                            let t = w.of(&total);
                            t > 0 && w.of(&n.total) as f64 >= threshold * t as f64
                        })
                    })
                    .collect();
                keep[0] = true;
                let kept = keep.iter().filter(|&&k| k).count();
                // One `[below threshold]` node at most per kept parent.
                if kept * 2 <= max_nodes || threshold == THRESHOLDS[THRESHOLDS.len() - 1] {
                    pruned = Some(threshold);
                    break;
                }
            }
        }
        let pruned_name = intern(PRUNED_NAME.to_string());
        let mut out = FlameTree {
            names,
            ..FlameTree::default()
        };
        // Depth first from the root, children by name (a stable order),
        // each dropped child's whole total folded into its parent's one
        // `[below threshold]` child.
        let mut stack: Vec<(usize, i64)> = vec![(0, -1)];
        while let Some((n, parent)) = stack.pop() {
            let me = out.name.len() as i64;
            out.name.push(nodes[n].name);
            out.parent.push(parent);
            push_self(&mut out, me as usize, &nodes[n].own);
            let mut children: Vec<usize> = nodes[n].children.values().copied().collect();
            children.sort_by(|&a, &b| {
                out.names[nodes[b].name as usize].cmp(&out.names[nodes[a].name as usize])
            });
            let mut below = Values::default();
            for c in children {
                if keep[c] {
                    stack.push((c, me));
                } else {
                    below.add(&nodes[c].total);
                }
            }
            if !below.is_zero() {
                let id = out.name.len();
                out.name.push(pruned_name);
                out.parent.push(me);
                push_self(&mut out, id, &below);
            }
        }
        out.pruned = pruned.map(|threshold| Pruned {
            threshold,
            nodes_before,
            nodes_after: out.name.len(),
        });
        out
    }
}

/// Enters `node`'s own figures `v` in `out`'s self values and lifetimes.
fn push_self(out: &mut FlameTree, node: usize, v: &Values) {
    if !v.is_zero() {
        let [c, b, t, p, l, tmp] = Weight::ALL.map(|w| w.of(v));
        out.selfs.push([node as u64, c, b, t, p, l, tmp]);
    }
    if v.freed_by_decade.iter().any(|&n| n > 0) || v.live_allocs > 0 {
        let mut row = [0u64; 12];
        row[0] = node as u64;
        row[1..10].copy_from_slice(&v.freed_by_decade);
        row[10] = v.lifetime_ticks;
        row[11] = v.live_allocs;
        out.lifetimes.push(row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The totals of every node, summed from the self values up.
    fn totals(t: &FlameTree) -> Vec<[u64; 6]> {
        let mut tot = vec![[0u64; 6]; t.name.len()];
        for s in &t.selfs {
            for w in 0..6 {
                tot[s[0] as usize][w] += s[w + 1];
            }
        }
        for n in (1..t.name.len()).rev() {
            let p = t.parent[n] as usize;
            assert!(p < n, "parents come before children");
            let child = tot[n];
            for (t, c) in tot[p].iter_mut().zip(child) {
                *t += c;
            }
        }
        tot
    }

    fn stack(path: &str, allocs: u64, bytes: u64) -> (Vec<String>, Values) {
        let values = Values {
            allocs,
            bytes,
            ..Values::default()
        };
        (path.split(';').map(String::from).collect(), values)
    }

    fn node(t: &FlameTree, path: &[&str]) -> Option<usize> {
        let mut at = 0;
        for name in path {
            at = (0..t.name.len())
                .find(|&n| t.parent[n] == at as i64 && t.names[t.name[n] as usize] == *name)?;
        }
        Some(at)
    }

    #[test]
    fn stacks_merge_by_path_with_self_and_total_values() {
        let t = FlameTree::from_paths(
            [
                stack("main;a;malloc", 1, 10),
                stack("main;a;malloc", 2, 20),
                stack("main;b;malloc", 4, 40),
                stack("main;a", 8, 80),
            ],
            MAX_NODES,
        );
        // all, main, a, a;malloc, b, b;malloc
        assert_eq!(t.name.len(), 6);
        assert!(t.pruned.is_none());
        let tot = totals(&t);
        assert_eq!(tot[0], [15, 150, 0, 0, 0, 0]);
        let a = node(&t, &["main", "a"]).unwrap();
        assert_eq!(tot[a], [11, 110, 0, 0, 0, 0]);
        let own_a = t.selfs.iter().find(|s| s[0] == a as u64).unwrap();
        assert_eq!(own_a[1..], [8, 80, 0, 0, 0, 0]);
        let am = node(&t, &["main", "a", "malloc"]).unwrap();
        assert_eq!(tot[am], [3, 30, 0, 0, 0, 0]);
        // The name table holds each name once.
        assert_eq!(t.names.iter().filter(|n| *n == "malloc").count(), 1);
    }

    #[test]
    fn a_large_tree_is_pruned_with_its_values_kept_under_the_threshold_node() {
        // One big stack and 1,000 tiny ones, each under its own function.
        let mut stacks = vec![stack("main;big", 1, 1_000_000_000)];
        for i in 0..1000 {
            stacks.push(stack(&format!("main;tiny{i};leaf"), 1, 1));
        }
        let t = FlameTree::from_paths(stacks, 100);
        let p = t.pruned.as_ref().expect("pruned");
        assert_eq!(p.nodes_before, 2 + 1 + 2000);
        assert!(p.nodes_after * 2 <= 100 || p.threshold == 1e-2, "{p:?}");
        assert_eq!(p.nodes_after, t.name.len());
        let tot = totals(&t);
        // Nothing is lost: the root's totals are the sums of all stacks.
        assert_eq!(tot[0], [1001, 1_000_001_000, 0, 0, 0, 0]);
        let below = node(&t, &["main", PRUNED_NAME]).expect("a [below threshold] node");
        assert_eq!(tot[below][0], 1000);
        assert!(node(&t, &["main", "big"]).is_some());
    }
}
