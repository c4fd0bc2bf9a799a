#if os(Linux)
import CoreFoundation
import Foundation

/// What a `StreamEventDelivery` hands its coalesced events to.
protocol StreamEventTarget: AnyObject {
    /// Delivers, in Apple's order, those of `events` that still hold, to the stream's delegate.
    /// Runs on a thread running a run loop the stream is scheduled in.
    func deliver(_ events: Stream.Event)
}

/// Carries stream events from whatever thread notices them to the run loops a stream is scheduled in.
///
/// This is the part of CFStream that swift-corelibs-foundation's `Stream` subclasses cannot reach:
/// one version-0 `CFRunLoopSource` per stream, added to every (run loop, mode) the stream is
/// scheduled in. `post` records events in a pending set and signals the source; the run loop that
/// next runs in a matching mode calls `perform`, which hands the whole set to the target. Events
/// posted while nothing is scheduled wait in the set until something is, as with CFStream.
///
/// Because the source is a run-loop source, `RunLoop.run(mode:before:)` returns after it fired, and
/// an idle stream costs nothing: the run loop sleeps in the kernel until a `post` wakes it.
///
/// Lifetime: while scheduled, the delivery holds its target strongly (a scheduled CFStream is
/// retained by its run loops too), so fire-and-forget delegate code keeps working; `detach()` (on
/// close) or removing the last schedule lets go.
///
/// Threading: every method may be called from any thread. `NSLock` `lock` protects all state.
/// CF calls made under `lock` never call back into this object synchronously, so the order is
/// always `lock` before the run loop's own locks.
final class StreamEventDelivery: @unchecked Sendable {
    private struct Schedule {
        let runLoop: CFRunLoop
        let mode: CFRunLoopMode
        let key: ScheduleKey
    }

    private struct ScheduleKey: Hashable {
        let runLoop: ObjectIdentifier
        let mode: String
    }

    private let lock = NSLock()
    private var pending: Stream.Event = []
    private var schedules: [Schedule] = []
    private var source: CFRunLoopSource?
    private var target: StreamEventTarget?
    private var detached = false

    /// Adds `events` to the pending set and wakes the run loops the stream is scheduled in.
    func post(_ events: Stream.Event) {
        lock.withLock {
            guard !detached else { return }
            pending.formUnion(events)
            signalLocked()
        }
    }

    /// Starts delivering to `target` on `runLoop` in `mode`; events already pending follow at once.
    func schedule(_ target: StreamEventTarget, in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        let cfRunLoop = Self.cfRunLoop(of: runLoop)
        let key = ScheduleKey(runLoop: ObjectIdentifier(cfRunLoop), mode: mode.rawValue)
        lock.withLock {
            guard !detached, !schedules.contains(where: { $0.key == key }) else { return }
            let source = self.source ?? makeSource()
            self.source = source
            self.target = target
            let cfMode = Self.cfMode(mode)
            CFRunLoopAddSource(cfRunLoop, source, cfMode)
            schedules.append(Schedule(runLoop: cfRunLoop, mode: cfMode, key: key))
            signalLocked()
        }
    }

    /// Stops delivering on `runLoop` in `mode`; after the last schedule is gone the target is released.
    func remove(from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        let key = ScheduleKey(runLoop: ObjectIdentifier(Self.cfRunLoop(of: runLoop)), mode: mode.rawValue)
        let released: StreamEventTarget? = lock.withLock {
            guard let index = schedules.firstIndex(where: { $0.key == key }), let source else { return nil }
            let schedule = schedules.remove(at: index)
            CFRunLoopRemoveSource(schedule.runLoop, source, schedule.mode)
            return schedules.isEmpty ? dropSourceLocked() : nil
        }
        // The stream may be released here; never while `lock` is held.
        _ = released
    }

    /// Stops all delivery for good (the stream closed): unschedules everywhere, drops pending events.
    func detach() {
        let released: StreamEventTarget? = lock.withLock {
            detached = true
            pending = []
            return dropSourceLocked()
        }
        _ = released
    }

    /// The CF source's perform callback: hands the pending set to the target, on the run-loop thread.
    fileprivate func performPending() {
        let (events, target): (Stream.Event, StreamEventTarget?) = lock.withLock {
            defer { pending = [] }
            return (pending, self.target)
        }
        guard let target, !events.isEmpty else { return }
        target.deliver(events)
    }

    private func signalLocked() {
        guard let source, !pending.isEmpty else { return }
        CFRunLoopSourceSignal(source)
        for schedule in schedules { CFRunLoopWakeUp(schedule.runLoop) }
    }

    /// Invalidates the source (removing it from every run loop) and returns the target to release.
    private func dropSourceLocked() -> StreamEventTarget? {
        if let source { CFRunLoopSourceInvalidate(source) }
        source = nil
        schedules = []
        defer { target = nil }
        return target
    }

    private func makeSource() -> CFRunLoopSource {
        // CF retains `info` for the source's lifetime and the run loop retains the source while it
        // performs, so `performPending` never runs on a freed delivery.
        var context = CFRunLoopSourceContext()
        context.info = Unmanaged.passUnretained(self).toOpaque()
        context.retain = { info in
            guard let info else { return nil }
            _ = Unmanaged<StreamEventDelivery>.fromOpaque(info).retain()
            return info
        }
        context.release = { info in
            guard let info else { return }
            Unmanaged<StreamEventDelivery>.fromOpaque(info).release()
        }
        context.perform = { info in
            guard let info else { return }
            Unmanaged<StreamEventDelivery>.fromOpaque(info).takeUnretainedValue().performPending()
        }
        return CFRunLoopSourceCreate(kCFAllocatorDefault, 0, &context)
    }

    // MARK: RunLoop → CFRunLoop

    /// The CFRunLoop behind a Foundation `RunLoop`.
    ///
    /// `RunLoop.getCFRunLoop()` is internal in swift-corelibs-foundation. The current and main run
    /// loops have CF accessors; any other `RunLoop` (one passed in from another thread) keeps its
    /// CFRunLoop in the stored property `_cfRunLoopStorage`, which reflection can read.
    static func cfRunLoop(of runLoop: RunLoop) -> CFRunLoop {
        if runLoop === RunLoop.current { return CFRunLoopGetCurrent() }
        if runLoop === RunLoop.main { return CFRunLoopGetMain() }
        // `_cfRunLoopStorage` is an `AnyObject?`; the mirror of the optional has the object as its child.
        let stored = Mirror(reflecting: runLoop).children.first { $0.label == "_cfRunLoopStorage" }?.value
        guard let value = stored.flatMap({ Mirror(reflecting: $0).children.first?.value }),
              type(of: value) is AnyClass,
              CFGetTypeID(value as AnyObject) == CFRunLoopGetTypeID()
        else {
            preconditionFailure("this Foundation's RunLoop no longer keeps its CFRunLoop in _cfRunLoopStorage")
        }
        // The object is a CFRunLoop (checked above), but Swift cannot downcast to a CF type, so
        // reinterpret the reference.
        let object = Unmanaged.passUnretained(value as AnyObject).toOpaque()
        return Unmanaged<CFRunLoop>.fromOpaque(object).takeUnretainedValue()
    }

    /// The CF mode name for a `RunLoop.Mode`; the common modes must be the CF constant itself.
    static func cfMode(_ mode: RunLoop.Mode) -> CFRunLoopMode {
        switch mode {
        case .default: return kCFRunLoopDefaultMode
        case .common: return kCFRunLoopCommonModes
        default:
            return CFStringCreateWithCString(kCFAllocatorDefault, mode.rawValue, CFStringBuiltInEncodings.UTF8.rawValue)
        }
    }
}
#endif
