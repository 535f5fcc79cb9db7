//! Making a consumer: its state from a configuration, and its jitter seeded.

use super::*;

impl Consumer {
    /// A consumer, disconnected: connect, then call [`on_connected`](Self::on_connected).
    pub fn new(config: Config) -> Result<Consumer, ConfigError> {
        config.validate()?;
        let mut streams = vec![Stream::new(config.stream.clone())];
        for key in &config.more_streams {
            if streams.iter().all(|s| s.key != key) {
                streams.push(Stream::new(key.clone()));
            }
        }
        let index = streams.iter().enumerate().map(|(i, s)| (s.key.clone(), i as u32)).collect();
        let mut consumer = Consumer {
            leave_due: config.leave_on_stop && !config.allow_twins,
            leaving_link: false,
            cut: None,
            dropped: None,
            left: (None, None),
            moves_owed: false,
            releasing: false,
            parking: false,
            waited_at: None,
            jitter: !config.seed.unwrap_or(FALLBACK_SEED),
            decoder: Decoder::new(config.limits),
            backoff: Backoff::new(
                config.backoff_min,
                config.backoff_max,
                config.seed.unwrap_or(FALLBACK_SEED),
            ),
            pace: Pace::new(
                config.count,
                config.lease_threshold(),
                config.read_bytes.min(config.limits.max_frame),
                config.concurrency,
                config.start_count_in_force(),
            ),
            index,
            streams,
            active: Arc::from([]),
            keys_wire: Vec::new(),
            reading: Vec::new(),
            turn: 0,
            config,
            link: Link::Fresh,
            out: BytesMut::with_capacity(4096),
            in_flight: Pipeline::default(),
            buffer: VecDeque::new(),
            staged: None,
            in_hand: Vec::new(),
            held: HeldIds::default(),
            keys_in_hand: HashSet::default(),
            ack_pool: Vec::new(),
            ack_due: None,
            script: None,
            cluster: false,
            backlog: false,
            notices: VecDeque::new(),
            stop: Stop::Running,
            failing: None,
            failed: None,
            connected_before: false,
            heard: false,
            done_by: None,
            announced_before: false,
            redirect: None,
            asking: false,
            tracked_upto: 0,
            last_now: None,
            undated: None,
            read_answered: false,
            health: None,
            health_refused: false,
            dead_letters_refused: false,
            twins: Twins::default(),
            dialect: Dialect::CLASSIC,
            server: String::new(),
            vetting: false,
            told_not_master: None,
            replicas_behind: false,
            replicas_told: None,
            lag_checked: None,
            lease_floor: None,
            stats: Stats::default(),
        };
        consumer.rebuild_active();
        Ok(consumer)
    }

    /// The jitter of reconnects, seeded from the driver's randomness (the core has none):
    /// unless [`Config::seed`] names a seed, the transports call this with one of their own
    /// process, so that consumers restarted at once (a fleet, a deploy) do not reconnect in
    /// step. A driver of its own SHOULD too, right after [`new`](Self::new) — e.g. with
    /// `std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0)`;
    /// without it every process waits the same delays. Does nothing if `Config::seed` is set.
    pub fn reseed(&mut self, seed: u64) {
        if self.config.seed.is_none() {
            self.backoff = Backoff::new(self.config.backoff_min, self.config.backoff_max, seed);
            self.jitter = !seed;
        }
    }
}
