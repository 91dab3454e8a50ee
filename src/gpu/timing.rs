//! Timing on the device clock. `graph` mode (the ranking mode): R launches captured into
//! one CUDA graph, replayed between two events; device time per launch = replay time / R.
//! `offline` mode: R direct launches back to back between two events, host launch
//! overhead included. Statistics over the samples belong to the benchmark, not here.

use super::ffi::{Event, GraphExec};
use super::{Gpu, GpuError, at};

/// Anything the benchmark can time: it queues its work on the GPU's one stream.
pub trait Contender {
    /// What it is, for logs and errors, e.g. `cuBLAS GemmEx tn f32`.
    fn label(&self) -> String;
    /// Queues one product (all its launches) on the stream, without waiting.
    fn enqueue(&self, gpu: &Gpu) -> Result<(), GpuError>;
}

/// One CUDA graph holding `launches` back-to-back runs of a contender, replayable.
pub struct GraphTimer {
    exec: GraphExec,
    launches: u32,
    start: Event,
    end: Event,
    label: String,
}

impl GraphTimer {
    /// Runs the contender once outside the graph (so libraries finish their lazy set-up),
    /// then captures `launches` runs into a graph and uploads it.
    pub fn capture(gpu: &Gpu, contender: &dyn Contender, launches: u32) -> Result<GraphTimer, GpuError> {
        let label = contender.label();
        let stage = format!("graph timing of {label}");
        if launches == 0 {
            return Err(GpuError::refused(stage, "a graph needs at least one launch"));
        }
        contender.enqueue(gpu).map_err(|e| e.within(format!("{stage}: warm-up")))?;
        gpu.stream().synchronize().map_err(at(format!("{stage}: warm-up")))?;
        gpu.stream().begin_capture().map_err(at(format!("{stage}: begin capture")))?;
        let mut queued = Ok(());
        for _ in 0..launches {
            queued = contender.enqueue(gpu);
            if queued.is_err() {
                break;
            }
        }
        // End the capture whatever happened, so the stream is usable again.
        let ended = gpu.stream().end_capture();
        queued.map_err(|e| e.within(format!("{stage}: capture")))?;
        let exec = ended.map_err(at(format!("{stage}: end capture")))?;
        exec.upload(gpu.stream()).map_err(at(format!("{stage}: upload graph")))?;
        let start = Event::new(gpu.context()).map_err(at(&stage))?;
        let end = Event::new(gpu.context()).map_err(at(&stage))?;
        Ok(GraphTimer { exec, launches, start, end, label })
    }

    pub fn launches_per_replay(&self) -> u32 {
        self.launches
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// Replays the graph once between two events; returns device µs per launch.
    pub fn replay(&self, gpu: &Gpu) -> Result<f64, GpuError> {
        let stage = format!("graph replay of {}", self.label);
        let s = gpu.stream();
        self.start.record(s).map_err(at(&stage))?;
        self.exec.launch(s).map_err(at(&stage))?;
        self.end.record(s).map_err(at(&stage))?;
        self.end.synchronize().map_err(at(&stage))?;
        let ms = self.start.elapsed_ms(&self.end).map_err(at(&stage))?;
        Ok(ms as f64 * 1000.0 / self.launches as f64)
    }
}

/// Captures `launches` runs into a graph, replays it once to warm up, then `replays`
/// times; returns device µs per launch for each timed replay.
pub fn time_graph(gpu: &Gpu, contender: &dyn Contender, launches: u32, replays: u32) -> Result<Vec<f64>, GpuError> {
    let timer = GraphTimer::capture(gpu, contender, launches)?;
    timer.replay(gpu)?;
    (0..replays).map(|_| timer.replay(gpu)).collect()
}

/// `offline` mode: one warm-up, then `launches` direct launches back to back between two
/// events; returns µs per launch (host launch overhead included where it shows).
pub fn time_direct(gpu: &Gpu, contender: &dyn Contender, launches: u32) -> Result<f64, GpuError> {
    let stage = format!("direct timing of {}", contender.label());
    if launches == 0 {
        return Err(GpuError::refused(stage, "needs at least one launch"));
    }
    contender.enqueue(gpu).map_err(|e| e.within(&stage))?;
    let start = Event::new(gpu.context()).map_err(at(&stage))?;
    let end = Event::new(gpu.context()).map_err(at(&stage))?;
    start.record(gpu.stream()).map_err(at(&stage))?;
    for _ in 0..launches {
        contender.enqueue(gpu).map_err(|e| e.within(&stage))?;
    }
    end.record(gpu.stream()).map_err(at(&stage))?;
    end.synchronize().map_err(at(&stage))?;
    let ms = start.elapsed_ms(&end).map_err(at(&stage))?;
    Ok(ms as f64 * 1000.0 / launches as f64)
}

/// Two events for timing direct launches, made once and reused sample after sample.
pub struct EventTimer {
    start: Event,
    end: Event,
}

impl EventTimer {
    pub fn new(gpu: &Gpu) -> Result<EventTimer, GpuError> {
        let start = Event::new(gpu.context()).map_err(at("create timing events"))?;
        let end = Event::new(gpu.context()).map_err(at("create timing events"))?;
        Ok(EventTimer { start, end })
    }

    /// One launch after a pause of `pause` on the device (`checks::pause`, not timed),
    /// between the two events: a `paced` sample, µs.
    pub fn time_paced(&self, gpu: &Gpu, contender: &dyn Contender, pause: std::time::Duration) -> Result<f64, GpuError> {
        super::checks::pause(gpu, pause)?;
        self.time_launches(gpu, contender, 1)
    }

    /// `launches` direct launches back to back between the two events, no warm-up (the
    /// caller has warmed up); returns µs per launch. With one launch after an idle device
    /// this is a `server` sample; with many, an `offline` one.
    pub fn time_launches(&self, gpu: &Gpu, contender: &dyn Contender, launches: u32) -> Result<f64, GpuError> {
        let stage = format!("direct timing of {}", contender.label());
        if launches == 0 {
            return Err(GpuError::refused(stage, "needs at least one launch"));
        }
        self.start.record(gpu.stream()).map_err(at(&stage))?;
        for _ in 0..launches {
            contender.enqueue(gpu).map_err(|e| e.within(&stage))?;
        }
        self.end.record(gpu.stream()).map_err(at(&stage))?;
        self.end.synchronize().map_err(at(&stage))?;
        let ms = self.start.elapsed_ms(&self.end).map_err(at(&stage))?;
        Ok(ms as f64 * 1000.0 / launches as f64)
    }
}
