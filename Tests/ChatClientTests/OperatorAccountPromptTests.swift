import Foundation
import Testing
import TestSupport

/// `chat-server account add` asking for the password in a real terminal (tmux): nothing typed is
/// echoed, the terminal's echo comes back afterwards — after Ctrl-C too — and the account is made.
@Suite("chat-server account's password prompt in a terminal", .serialized)
struct OperatorAccountPromptTests {
    @Test func thePasswordIsReadWithoutEchoAndTheTerminalIsRestoredAfterAnAnswerAndAfterCtrlC() async throws {
        let home = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: home) }
        let data = home.appendingPathComponent("data").path
        let typed = try await TmuxSession(try Self.accountCommandInTerminal(["add", "root", "--data-dir", data], home: home))
        defer { typed.stop() }
        #expect(try await typed.waitFor("password for root:"))
        try await typed.type("typed-secret-1")
        try await typed.press("Enter")
        #expect(try await typed.waitFor("again:"))
        try await typed.type("typed-secret-1")
        try await typed.press("Enter")
        #expect(try await typed.waitFor("EXIT=0"))
        // The wrapper prints the terminal's settings a moment after the exit status.
        #expect(try await typed.waitFor("TTY="))
        let screen = try await typed.screen()
        #expect(screen.contains { $0.contains("account root created") }, "\(screen)")
        #expect(!screen.contains { $0.contains("typed-secret") }, "the password was echoed: \(screen)")
        #expect(screen.contains { $0.hasPrefix("TTY=") && $0.contains(" echo") && !$0.contains("-echo") }, "echo is back: \(screen)")

        let interrupted = try await TmuxSession(try Self.accountCommandInTerminal(["add", "other", "--data-dir", data], home: home))
        defer { interrupted.stop() }
        #expect(try await interrupted.waitFor("password for other:"))
        try await interrupted.type("half")
        try await interrupted.press("C-c")
        #expect(try await interrupted.waitFor("EXIT=130"))
        #expect(try await interrupted.waitFor("TTY="))
        let after = try await interrupted.screen()
        #expect(after.contains { $0.hasPrefix("TTY=") && $0.contains(" echo") && !$0.contains("-echo") }, "echo is back after Ctrl-C: \(after)")

        let list = try ChildProcess(try ChildProcess.builtExecutable(named: "chat-server"), ["account", "list", "--data-dir", data])
        list.closeInput()
        #expect(await list.waitForExit() == 0)
        #expect(list.lines == ["root"], "root was made, other was not: \(list.output)")
    }

    /// The shell command that runs `chat-server account …` in a terminal and then reports its exit
    /// status and whether the terminal echoes.
    static func accountCommandInTerminal(_ arguments: [String], home: URL) throws -> String {
        let server = try ChildProcess.builtExecutable(named: "chat-server").path
        let wrapper = home.appendingPathComponent("run-account-\(UUID().uuidString.prefix(8)).sh")
        try """
            #!/bin/sh
            # Ctrl-C goes to the whole foreground group: the wrapper must outlive it to report.
            trap : INT
            "$@"
            printf 'EXIT=%s\\n' "$?"
            printf 'TTY= %s\\n' "$(stty -a | tr ' ;' '\\n\\n' | grep -xE -- '-?echo' | tr '\\n' ' ')"
            exec sleep 600
            """.write(to: wrapper, atomically: true, encoding: .utf8)
        return "env HOME='\(home.path)' LANG=C.UTF-8 sh '\(wrapper.path)' '\(server)' account " + arguments.map { "'\($0)'" }.joined(separator: " ")
    }
}
