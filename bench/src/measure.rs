//! What a run costs: wall time, the calling thread's CPU time, the server's CPU time.

use std::time::{Duration, Instant};

use pelican_tests::admin::{Admin, Reply};

/// CPU time the calling thread has used so far (`/proc/thread-self/schedstat`, in ns), if the
/// kernel reports it.
pub fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// CPU time the whole process has used so far, all its threads, user and system
/// (`/proc/self/stat`: `utime` + `stime`, in ticks of 10 ms), if the kernel reports it.
pub fn process_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (which may hold spaces) start at `state`, the
    // third; `utime` and `stime` are the 14th and 15th.
    let mut fields = text.rsplit_once(')')?.1.split_whitespace().skip(11);
    let mut ticks = || fields.next()?.parse::<u64>().ok();
    Some(Duration::from_millis(10 * (ticks()? + ticks()?)))
}

/// CPU time the server has used so far, all its threads (`INFO cpu`: `used_cpu_sys` +
/// `used_cpu_user`, in seconds with microseconds).
pub fn server_cpu(admin: &mut Admin) -> Duration {
    let field = |admin: &mut Admin, name: &str| -> f64 {
        admin.info_field("cpu", name).and_then(|v| v.parse().ok()).unwrap_or(0.0)
    };
    Duration::from_secs_f64(field(admin, "used_cpu_sys") + field(admin, "used_cpu_user"))
}

/// One contender's run over the whole stream.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub wall: Duration,
    /// The consuming thread's CPU time.
    pub client_cpu: Option<Duration>,
    pub server_cpu: Duration,
}

impl Sample {
    /// Runs `consume` and measures it.
    pub fn take(admin: &mut Admin, consume: impl FnOnce()) -> Sample {
        let (server_before, cpu_before, started) = (server_cpu(admin), thread_cpu(), Instant::now());
        consume();
        let wall = started.elapsed();
        let client_cpu = thread_cpu().zip(cpu_before).map(|(after, before)| after.saturating_sub(before));
        let server_cpu = server_cpu(admin).saturating_sub(server_before);
        Sample { wall, client_cpu, server_cpu }
    }
}

/// The median and the range of `values` (which must not be empty).
pub fn median_range(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 };
    (median, values[0], values[n - 1])
}

/// Adds `total` entries at `rate` a second, round-robin over `keys`, each stamped (field `t`,
/// `stamp()` as it is sent), in small pipelines every 200 µs so that the pace stays even.
pub fn produce(
    admin: &mut Admin,
    keys: &[String],
    rate: u32,
    total: u64,
    stamp: impl Fn() -> String,
) -> Result<(), String> {
    let started = Instant::now();
    let mut sent = 0u64;
    while sent < total {
        let due = ((started.elapsed().as_secs_f64() * f64::from(rate)) as u64).min(total);
        if due > sent {
            let batch: Vec<Vec<String>> = (sent..due)
                .map(|i| {
                    let key = &keys[(i % keys.len() as u64) as usize];
                    vec!["XADD".into(), key.clone(), "*".into(), "t".into(), stamp()]
                })
                .collect();
            if let Some(e) = admin.pipeline(&batch).into_iter().find(Reply::is_error) {
                return Err(format!("XADD: {e:?}"));
            }
            sent = due;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median_range(&mut [3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(median_range(&mut [4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
    }

    #[test]
    fn this_thread_has_used_some_cpu() {
        if let Some(cpu) = thread_cpu() {
            let spin = Instant::now();
            while spin.elapsed() < Duration::from_millis(20) {}
            assert!(thread_cpu().unwrap() > cpu);
        }
    }

    #[test]
    fn this_process_has_used_some_cpu() {
        if let Some(cpu) = process_cpu() {
            let spin = Instant::now();
            while spin.elapsed() < Duration::from_millis(50) {}
            assert!(process_cpu().unwrap() > cpu);
        }
    }
}
