import ChatClient
import Dispatch
import Foundation
import Glibc

/// Wires a driver to the terminal or pipe front end and to the signals that end the client,
/// and makes sure the terminal is restored on every way out.
@MainActor
enum ClientApp {
    /// Runs the client until it finishes; returns the exit status.
    static func run(
        configuration: ChatClientDriver.Configuration, session: ClientSession, interactive: Bool, historyFile: String?,
        settings: ClientSettings, configPath: String?
    ) async -> Int32 {
        let colour = MessageRenderer.wantsColour(isTerminal: true, environment: ProcessInfo.processInfo.environment)
        let terminal = interactive
            ? TerminalFrontEnd(historyFile: historyFile, colour: colour, settings: settings, configPath: configPath)
            : nil
        let pipe = terminal == nil ? PipeFrontEnd() : nil
        let display: any ClientDisplay = terminal ?? pipe!
        let driver = ChatClientDriver(configuration: configuration, session: session, display: display)
        driver.aliases = settings.aliases

        let status = await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            driver.onFinished = { status in
                terminal?.stop(status: status)
                continuation.resume(returning: status)
            }
            let signals = SignalTrap(terminal: terminal, driver: driver)
            signals.install()
            keepAlive = signals
            if let terminal { terminal.start(driver: driver) } else { pipe?.start(driver: driver) }
            driver.start()
        }
        return status
    }

    private static var keepAlive: SignalTrap?
}

/// Turns SIGINT, SIGTERM and SIGHUP into a clean exit, and SIGWINCH into a redraw.
///
/// The signals are ignored first, so only the Dispatch sources (on the main queue) see them:
/// the client then runs its normal exit path and restores the terminal. A second
/// SIGINT/SIGTERM while leaving exits at once, still restoring the terminal.
@MainActor
final class SignalTrap {
    private let terminal: TerminalFrontEnd?
    private weak var driver: ChatClientDriver?
    private var sources: [DispatchSourceSignal] = []
    private var leaving = false

    init(terminal: TerminalFrontEnd?, driver: ChatClientDriver) {
        self.terminal = terminal
        self.driver = driver
    }

    func install() {
        for (signalNumber, reason) in [(SIGINT, "interrupted"), (SIGTERM, "terminated"), (SIGHUP, "terminal closed")] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .main)
            source.setEventHandler { @Sendable in
                MainActor.assumeIsolated { SignalTrap.leave(reason: reason) }
            }
            source.resume()
            sources.append(source)
        }
        signal(SIGWINCH, SIG_IGN)
        let resize = DispatchSource.makeSignalSource(signal: SIGWINCH, queue: .main)
        resize.setEventHandler { @Sendable in
            MainActor.assumeIsolated { SignalTrap.current?.terminal?.terminalResized() }
        }
        resize.resume()
        sources.append(resize)
        SignalTrap.current = self
    }

    private static var current: SignalTrap?

    private static func leave(reason: String) {
        guard let trap = current else { return }
        if trap.leaving {
            trap.terminal?.stop()
            exit(130)
        }
        trap.leaving = true
        trap.driver?.quit(reason: reason)
    }
}
