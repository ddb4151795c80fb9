//! The memory timeline: live heap bytes and resident memory of a process,
//! sampled over its whole run in bounded memory, as heaptrack's
//! "consumed" graph and `massif`'s snapshots do.
//!
//! The shim samples a point every [`BASE_INTERVAL_NS`] into a
//! [`TimelineBuffer`] of [`CAPACITY`] points. When the buffer is full it
//! halves its resolution: neighbouring pairs merge into one point that keeps
//! the larger live and resident figures (so a peak stays visible at any
//! zoom), and the sampling interval doubles. The timeline therefore always
//! spans the whole run with at most `CAPACITY` points, at a resolution of
//! about `run time / CAPACITY` or better.
//!
//! A profile keeps the points as `timeline` and `tl` lines (see
//! [`crate::profile`]); they are read back as a [`Timeline`].

/// Points a process's timeline keeps at most (about 40 bytes each in the
/// profile, so at most ~80 KiB of text per process).
pub const CAPACITY: usize = 2048;

/// The sampling interval a timeline starts with, in ns (10 ms): short
/// enough to show the phases of a program that runs for a fraction of a
/// second, long enough that sampling (a read of `/proc/self/statm` and a
/// walk of the thread registry, some microseconds) costs well under 0.1%
/// of one CPU. heaptrack's default interval is the same.
pub const BASE_INTERVAL_NS: u64 = 10_000_000;

/// One sample of a process's memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimelinePoint {
    /// Nanoseconds since the recorder started in the process (the
    /// profile's `clock_start`).
    pub t_ns: u64,
    /// Heap bytes live: usable sizes allocated minus freed.
    pub live_bytes: u64,
    /// Resident set size in bytes (0 if it could not be read).
    pub rss_bytes: u64,
    /// Temporary allocations so far (see
    /// [`SiteCounts::temporary`](crate::SiteCounts::temporary)); 0 where
    /// they are not counted ([`Timeline::temporary_counted`]).
    pub temporary: u64,
}

impl TimelinePoint {
    /// The point standing for two neighbours: the earlier time, the larger
    /// of each figure (so peaks survive a halving of the resolution).
    pub fn merge(self, later: TimelinePoint) -> TimelinePoint {
        TimelinePoint {
            t_ns: self.t_ns.min(later.t_ns),
            live_bytes: self.live_bytes.max(later.live_bytes),
            rss_bytes: self.rss_bytes.max(later.rss_bytes),
            temporary: self.temporary.max(later.temporary),
        }
    }
}

/// A process's memory timeline, as read back from a profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// The sampling interval when the profile was written, in ns (the
    /// spacing of the points; 0 if the profile does not say).
    pub interval_ns: u64,
    /// The samples in time order: the first at start-up, the last at exit
    /// (or at the last periodic write of a process that did not exit).
    pub points: Vec<TimelinePoint>,
    /// Whether the points count temporary allocations (exact stacks, and a
    /// profile written since they were put on the timeline).
    pub temporary_counted: bool,
}

impl Timeline {
    /// Whether there is nothing to draw (profiles written before timelines
    /// existed, or by a writer that does not sample).
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Time of the last point, in ns since start-up.
    pub fn duration_ns(&self) -> u64 {
        self.points.last().map_or(0, |p| p.t_ns)
    }

    /// The highest live byte count sampled.
    pub fn peak_live_bytes(&self) -> u64 {
        self.points.iter().map(|p| p.live_bytes).max().unwrap_or(0)
    }

    /// The highest resident size sampled.
    pub fn peak_rss_bytes(&self) -> u64 {
        self.points.iter().map(|p| p.rss_bytes).max().unwrap_or(0)
    }
}

/// A timeline being recorded, in a fixed array: no heap, so the shim can
/// keep it in static memory and fill it from its writer thread.
#[derive(Clone, Debug)]
pub struct TimelineBuffer<const N: usize = CAPACITY> {
    points: [TimelinePoint; N],
    len: usize,
    interval_ns: u64,
    /// The most live bytes of any point so far (merging keeps maxima, so
    /// it is the points' maximum).
    top_live: u64,
}

impl<const N: usize> Default for TimelineBuffer<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> TimelineBuffer<N> {
    /// An empty timeline sampled every [`BASE_INTERVAL_NS`].
    pub const fn new() -> Self {
        // Halving merges pairs of a full buffer.
        const { assert!(N >= 2 && N.is_multiple_of(2)) };
        TimelineBuffer {
            points: [TimelinePoint {
                t_ns: 0,
                live_bytes: 0,
                rss_bytes: 0,
                temporary: 0,
            }; N],
            len: 0,
            interval_ns: BASE_INTERVAL_NS,
            top_live: 0,
        }
    }

    /// Empties the timeline and restores the first interval (a new process
    /// after `fork`).
    pub fn clear(&mut self) {
        self.len = 0;
        self.interval_ns = BASE_INTERVAL_NS;
        self.top_live = 0;
    }

    /// Adds a sampled point, after a point for the peak of live bytes
    /// (`peak_live`, the recorder's high-water mark) when the peak came
    /// and went between two samples: samples alone miss a peak shorter
    /// than their interval, and the timeline would top out below the
    /// profile's peak. Its time is unknown within the interval, so it
    /// stands halfway (off by at most half the interval), with the
    /// resident size read now.
    pub fn push_sample(&mut self, p: TimelinePoint, peak_live: u64) {
        if peak_live > self.top_live && peak_live > p.live_bytes {
            let before = self.points().last().map_or(0, |l| l.t_ns);
            self.push(TimelinePoint {
                t_ns: before + p.t_ns.saturating_sub(before) / 2,
                live_bytes: peak_live,
                rss_bytes: p.rss_bytes,
                temporary: p.temporary,
            });
        }
        self.push(p);
    }

    /// The interval at which points should now be taken, in ns.
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// The points so far, in time order.
    pub fn points(&self) -> &[TimelinePoint] {
        &self.points[..self.len]
    }

    /// Adds a point. A point earlier than the last one is moved to the last
    /// one's time, so the timeline stays in order whatever the caller's
    /// clocks do. When the buffer is full, neighbouring pairs merge first
    /// and the interval doubles.
    pub fn push(&mut self, mut p: TimelinePoint) {
        if let Some(last) = self.points().last() {
            p.t_ns = p.t_ns.max(last.t_ns);
        }
        if self.len == N {
            self.halve();
        }
        self.points[self.len] = p;
        self.len += 1;
        self.top_live = self.top_live.max(p.live_bytes);
    }

    /// Merges neighbouring pairs of the full (even-sized) buffer: half the
    /// points, at twice the interval.
    fn halve(&mut self) {
        let half = self.len / 2;
        for i in 0..half {
            self.points[i] = self.points[2 * i].merge(self.points[2 * i + 1]);
        }
        self.len = half;
        self.interval_ns = self.interval_ns.saturating_mul(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(t: u64, live: u64, rss: u64) -> TimelinePoint {
        TimelinePoint {
            t_ns: t,
            live_bytes: live,
            rss_bytes: rss,
            temporary: 0,
        }
    }

    #[test]
    fn a_peak_between_samples_gets_its_point() {
        let mut b = TimelineBuffer::<8>::new();
        b.push_sample(pt(0, 10, 1), 10);
        // The peak (50) came and went before the sample at 100.
        b.push_sample(pt(100, 20, 2), 50);
        assert_eq!(b.points(), &[pt(0, 10, 1), pt(50, 50, 2), pt(100, 20, 2)]);
        // Already on the timeline: no second point.
        b.push_sample(pt(200, 30, 3), 50);
        assert_eq!(b.points().len(), 4);
        // A peak the sample itself shows needs none either.
        b.push_sample(pt(300, 60, 3), 60);
        assert_eq!(b.points().len(), 5);
        b.clear();
        b.push_sample(pt(0, 0, 0), 5);
        assert_eq!(b.points(), &[pt(0, 5, 0), pt(0, 0, 0)]);
    }

    #[test]
    fn fills_then_halves_keeping_peaks_and_the_whole_span() {
        let mut b = TimelineBuffer::<8>::new();
        for i in 0..8 {
            b.push(pt(i * 10, if i == 3 { 1000 } else { i }, 100 - i));
        }
        assert_eq!(b.points().len(), 8);
        assert_eq!(b.interval_ns(), BASE_INTERVAL_NS);
        b.push(pt(80, 8, 50));
        assert_eq!(b.interval_ns(), 2 * BASE_INTERVAL_NS);
        assert_eq!(
            b.points(),
            [
                pt(0, 1, 100),
                pt(20, 1000, 98),
                pt(40, 5, 96),
                pt(60, 7, 94),
                pt(80, 8, 50),
            ]
        );
        // Many more points: never more than the capacity, first and last kept.
        for i in 9..10_000 {
            b.push(pt(i * 10, i, i));
        }
        let p = b.points();
        assert!(p.len() <= 8 && p.len() >= 4, "{}", p.len());
        assert_eq!(p[0].t_ns, 0);
        assert_eq!(p.last().unwrap().t_ns, 99_990);
        assert!(p.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
        assert_eq!(p.iter().map(|p| p.live_bytes).max(), Some(9_999));
        b.clear();
        assert!(b.points().is_empty());
        assert_eq!(b.interval_ns(), BASE_INTERVAL_NS);
    }

    #[test]
    fn points_stay_in_time_order() {
        let mut b = TimelineBuffer::<4>::new();
        b.push(pt(50, 1, 1));
        b.push(pt(40, 2, 2));
        assert_eq!(b.points()[1].t_ns, 50);
    }

    #[test]
    fn timeline_figures() {
        let t = Timeline {
            interval_ns: 10,
            points: vec![pt(0, 5, 7), pt(10, 9, 3), pt(25, 1, 8)],
            temporary_counted: false,
        };
        assert!(!t.is_empty());
        assert_eq!(
            (t.duration_ns(), t.peak_live_bytes(), t.peak_rss_bytes()),
            (25, 9, 8)
        );
        assert!(Timeline::default().is_empty());
    }
}
