import Dispatch

/// A Dispatch source together with the bookkeeping that suspending, resuming and cancelling it need.
///
/// libdispatch keeps a suspend count per source and holds its owner to two rules that nothing
/// checks at the call site: resume only as often as suspended (one resume too many traps), and
/// resume before cancelling (a suspended source never runs its cancel handler, so an owner that
/// waits for that handler before closing the descriptor waits forever). This type is the one place
/// those rules are written down: `suspend` and `resume` act only when they change the state, and
/// `cancel` resumes first and acts once.
///
/// A class, so that there is only ever one record of the suspend count. It has no lock of its own:
/// the owner confines it where the rest of its state lives (the bridge's stream pair under its
/// condition lock). `SocketChannel` needs none: its queue's `SocketPoller` watches its descriptor.
package final class SuspendableSource {
    private let source: any DispatchSourceProtocol
    /// Whether `suspend()` is in force.
    package private(set) var isSuspended = false
    /// Whether `cancel()` has run.
    package private(set) var isCancelled = false

    /// Takes `source`, whose handlers are already set, and activates it: it starts out resumed.
    package init(activating source: any DispatchSourceProtocol) {
        self.source = source
        source.activate()
    }

    /// Stops the source's event handler from being called; does nothing if already suspended or cancelled.
    package func suspend() {
        guard !isSuspended, !isCancelled else { return }
        isSuspended = true
        source.suspend()
    }

    /// Lets events through again after `suspend()`; does nothing unless suspended.
    package func resume() {
        guard isSuspended else { return }
        isSuspended = false
        source.resume()
    }

    /// Cancels the source, resuming it first if suspended so that its cancel handler runs.
    /// Calling it again does nothing.
    package func cancel() {
        guard !isCancelled else { return }
        resume()
        isCancelled = true
        source.cancel()
    }
}
