import Dispatch
import Glibc
import SocketCore

/// The signals a serving process acts on: SIGINT and SIGTERM stop it, SIGHUP reloads. They are
/// blocked in every thread from before the first thread starts, and Dispatch sources read them.
///
/// Why blocked: libdispatch on Linux reads a source's signal from a signalfd. Its manager thread
/// registers that signalfd some time after `activate()`, not during it. Until then a signal met
/// its disposition. Ignored (`SIG_IGN`, which the sources used to be given so that the default
/// action could not end the process first), it was lost: under CI's load a SIGHUP sent as soon as
/// "listening on" appeared was never seen. At its default, it ended the process. A blocked signal
/// stays pending until the signalfd reads it, however late that is.
///
/// Until `serve` is called, the process is starting. A stop signal then does what it would have
/// done unhandled, and ends the process, since there is nothing yet to shut down cleanly. A SIGHUP
/// is kept and handled once the server serves, since the configuration may have changed after
/// start-up read it.
///
/// `@unchecked Sendable`: the sources are set in `init` and never change; the phase is locked.
final class ServerSignals: @unchecked Sendable {
    /// What the server does on a signal once it serves.
    struct Handlers: Sendable {
        /// Shuts the server down; called with the signal's name ("SIGINT", "SIGTERM").
        let stop: @Sendable (_ signalName: String) -> Void
        /// Reloads the configuration.
        let reload: @Sendable () -> Void
    }

    private enum Phase {
        case starting(reloadAsked: Bool)
        case serving(Handlers)
    }

    /// One serial queue for every handler, so two reloads never run at once.
    private let queue = DispatchQueue(label: "chat-server.signals")
    private let phase = Locked(Phase.starting(reloadAsked: false))
    /// Kept for the process's life: a source that is released stops reading its signal.
    private var sources: [any DispatchSourceSignal] = []

    /// Blocks SIGINT, SIGTERM and SIGHUP and starts reading them. Call it before any thread
    /// starts: a thread started earlier keeps them unblocked, and one sent to the process may go
    /// to that thread instead.
    init() {
        var handled = sigset_t()
        sigemptyset(&handled)
        for number in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&handled, number) }
        pthread_sigmask(SIG_BLOCK, &handled, nil)
        sources = [SIGINT, SIGTERM, SIGHUP].map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [weak self] in self?.received(number) }
            source.activate()
            return source
        }
    }

    /// Hands the signals to `handlers` from now on, first a SIGHUP that came while starting.
    func serve(_ handlers: Handlers) {
        let reloadAsked = phase.withLock { phase in
            defer { phase = .serving(handlers) }
            if case .starting(reloadAsked: true) = phase { return true }
            return false
        }
        if reloadAsked { queue.async { handlers.reload() } }
    }

    private func received(_ number: Int32) {
        let handlers: Handlers? = phase.withLock { phase in
            switch phase {
            case .serving(let handlers):
                return handlers
            case .starting:
                if number == SIGHUP { phase = .starting(reloadAsked: true) }
                return nil
            }
        }
        guard let handlers else {
            if number != SIGHUP { Self.endUnhandled(by: number) }
            return
        }
        if number == SIGHUP {
            handlers.reload()
        } else {
            handlers.stop(number == SIGINT ? "SIGINT" : "SIGTERM")
        }
    }

    /// Ends the process as `number` does by default: the exit status says which signal it was.
    private static func endUnhandled(by number: Int32) -> Never {
        signal(number, SIG_DFL)
        var only = sigset_t()
        sigemptyset(&only)
        sigaddset(&only, number)
        pthread_sigmask(SIG_UNBLOCK, &only, nil)
        raise(number)
        _exit(128 + number)  // Not reached: SIGINT's and SIGTERM's default action ends the process.
    }
}
