import ChatProtocol
@testable import ChatServer
import Foundation
import Testing
import TestSupport

/// Failed logins in the real server's log, at its default level (info), for an operator who
/// exposes it to the internet and for tools such as fail2ban that act on the log: each names the
/// remote address and the account tried, never the password, and one address guessing hundreds
/// of times writes a bounded number of lines and a summary, as refusals at the door do.
@Suite("Failed logins in the server's log", .serialized)
struct LoginLogTests {
    /// A wrong password, a name without an account and the guesses the windows then refuse are
    /// each logged at info with the address and the account; the client's answers are the ones
    /// it got before (`authenticationFailed` alike for both names, then `throttled`).
    @Test(arguments: AccountAttackTests.everyMode)
    func aWrongPasswordANameWithoutAnAccountAndAThrottledGuessAreLoggedAtInfo(_ mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        let owner = try await TestClient.connect(to: server, nick: "victim", version: 3)
        try await owner.send(.register(password: "the right one"))
        #expect(try await registration(of: owner) == .registered(account: "victim"))
        owner.close()

        // Six guesses at one account: five checked, the sixth past the account's window from this address.
        let answers = await AccountAttackTests.loginAnswers(server, from: "127.0.0.2", account: "Victim", count: 6, password: "secret-guess-")
        #expect(answers == Array(repeating: .authenticationFailed, count: 5) + [.throttled], "the client's answers are unchanged")
        let probe = await AccountAttackTests.loginAnswers(server, from: "127.0.0.3", account: "nobody", count: 1, password: "secret-guess-")
        #expect(probe == [.authenticationFailed], "a name without an account is answered as a wrong password is")

        #expect(await server.child.waitForOutput("login.account=nobody", timeout: .seconds(10)), "\(mode): \(server.child.output)")
        let lines = server.child.lines
        let wrong = lines.filter { $0.contains(" login failed ") && $0.contains("connection.remote=127.0.0.2:") }
        #expect(wrong.count == 5, "\(mode): one line per wrong password:\n\(wrong.joined(separator: "\n"))")
        let wrongLine = try Regex(#" info login failed connection\.id=\d+ connection\.remote=127\.0\.0\.2:\d+ login\.account=victim login\.failure="wrong password"$"#)
        #expect(wrong.allSatisfy { $0.firstMatch(of: wrongLine) != nil }, "\(mode): the level, the address, the account (its key):\n\(wrong.joined(separator: "\n"))")
        let throttled = lines.filter { $0.contains(" login throttled ") }
        let throttledLine = try Regex(
            #" info login throttled connection\.id=\d+ connection\.remote=127\.0\.0\.2:\d+ login\.account=victim login\.retry\.seconds=\d+ login\.window=account$"#)
        #expect(throttled.count == 1 && throttled.allSatisfy { $0.firstMatch(of: throttledLine) != nil }, "\(mode): \(throttled)")
        let unknown = lines.filter { $0.contains(" login failed ") && $0.contains("connection.remote=127.0.0.3:") }
        let unknownLine = try Regex(#" info login failed connection\.id=\d+ connection\.remote=127\.0\.0\.3:\d+ login\.account=nobody login\.failure="no such account"$"#)
        #expect(unknown.count == 1 && unknown.allSatisfy { $0.firstMatch(of: unknownLine) != nil }, "\(mode): \(unknown)")
        #expect(!server.child.output.contains("secret-guess"), "\(mode): no password is ever logged")
    }

    /// 200 wrong logins from one address, every one checked (the guess windows raised out of the
    /// way): at most `LogThrottle`'s burst of lines per window of the flood, then summaries whose
    /// counts make up the rest.
    @Test func aFloodOfWrongLoginsFromOneAddressWritesABurstPerWindowAndASummary() async throws {
        let guesses = 200
        let server = try await ChatServerProcess(
            .memory,
            arguments: [
                "--handshake-timeout", "120", "--rate-limit", "1000", "--rate-burst", "1000",
                "--login-attempts-per-account-from-address", "1000", "--login-attempts-per-address", "1000",
                "--login-attempts-per-account", "1000",
            ])
        defer { server.stop() }
        let socket = try BlockingSocket(port: server.port, source: "127.0.0.9")
        defer { socket.close() }
        let started = ContinuousClock.now
        await socket.send(
            [.hello(version: 3, nick: "flooder", password: nil)] + (0..<guesses).map { Frame.login(account: "admin\($0 % 7)", password: "guess \($0)") })
        var answers: [ErrorCode?] = []
        for _ in 0..<guesses { answers.append(await errorCode(from: socket)) }
        let elapsed = ContinuousClock.now - started
        #expect(answers.allSatisfy { $0 == .authenticationFailed }, "every guess was checked: \(Set(answers.map { "\(String(describing: $0))" }))")

        let throttle = LogThrottle()
        let windows = Int(elapsed / .milliseconds(throttle.window)) + 1
        let key = "refusal=\"127.0.0.9: login failed\""
        let suppressed = { @Sendable (output: String) -> Int in
            output.split(separator: "\n").filter { $0.contains("refusals summarised") && $0.contains(key) }
                .compactMap { $0.split(separator: "refusal.suppressed=").last.flatMap { Int($0.prefix { $0.isNumber }) } }
                .reduce(0, +)
        }
        let written = { @Sendable (output: String) -> Int in
            output.split(separator: "\n").count { $0.contains(" login failed ") && $0.contains("connection.remote=127.0.0.9:") }
        }
        // The last window's summary is written once that window ends, at most `window` after the flood.
        let accounted = await server.child.waitFor(timeout: .seconds(40)) { output, _ in written(output) + suppressed(output) == guesses }
        let output = server.child.output
        #expect(accounted, "lines and summarised counts make up the \(guesses) failures: \(written(output)) + \(suppressed(output))")
        #expect(written(output) >= 1, "the flood is in the log")
        #expect(
            written(output) <= throttle.burst * windows,
            "at most \(throttle.burst) lines per \(throttle.window) ms window, \(windows) window(s) in \(elapsed): \(written(output))")
    }
}
