import Foundation
import Testing
import TestSupport

extension TerminalTests {
    /// `/register` and `/login` without `--account-password-file` ask for the password at a
    /// hidden prompt: not drawn, not in the history, not in the output; in pipe mode the lines
    /// after the command are the answers, as many as the terminal asks.
    @Suite struct PasswordPrompt {
        @Test func registerAsksForThePasswordWithoutShowingOrKeepingIt() async throws {
            let server = try await ChatServerProcess(arguments: ["--handshake-timeout", "60"])
            defer { server.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let history = home.appendingPathComponent("history")
            let tmux = try await TmuxSession(
                try clientInTerminal(nick: "alice", port: server.port, home: home, extra: ["--history-file", history.path]))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice joined")
            try await tmux.type("/register")
            try await tmux.press("Enter")
            try await tmux.waitFor("password for alice (not shown")
            try await tmux.type("hunter2")
            try await tmux.press("BSpace", "3")
            #expect(try await !tmux.screen().contains { $0.contains("hunter") }, "what is typed is not drawn")
            try await tmux.press("Enter")
            // A new password is asked for twice: a typo cannot be seen.
            try await tmux.waitFor("the same password again")
            try await tmux.type("hunter3")
            try await tmux.press("Enter")
            try await tmux.waitFor("registered the account alice")

            // The password goes nowhere else: not into the input line, the history or the screen.
            try await tmux.waitForInput("", prompt: TerminalTests.prompt)
            try await tmux.type("/help")
            try await tmux.press("Enter")
            #expect(await eventually { (try? String(contentsOf: history, encoding: .utf8))?.contains("/help") == true }, "the history is saved")
            let saved = try String(contentsOf: history, encoding: .utf8)
            #expect(saved.contains("/register") && !saved.contains("hunter"), "the history holds the command, not the password: \(saved)")
            try await tmux.press("Up", "Up")
            try await tmux.waitForInput("/register", prompt: TerminalTests.prompt)

            // Ctrl-C cancels; nothing is sent.
            try await tmux.press("C-u")
            try await tmux.type("/login")
            try await tmux.press("Enter")
            try await tmux.waitFor("password for alice (not shown")
            try await tmux.type("oops")
            try await tmux.press("C-c")
            try await tmux.waitFor("no password typed: nothing was sent")
            #expect(try await !tmux.screen().contains { $0.contains("oops") || $0.contains("hunter") })
        }

        @Test func aScriptTypesThePasswordOnTheNextLine() async throws {
            let server = try await ChatServerProcess(arguments: ["--handshake-timeout", "60"])
            defer { server.stop() }
            let client = try pipeClient(["--nick", "ann", "--port", "\(server.port)"])
            defer { client.stop() }
            #expect(await client.waitForOutput("joined"), "ann is in: \(client.output)")
            client.send("/register")
            client.send("hunter2")
            client.send("hunter2")
            #expect(await client.waitForOutput("registered the account ann"), "\(client.output)")
            client.send("/quit")
            #expect(await client.waitForExit() == 0)
            #expect(!client.output.contains("hunter2"), "the password line is neither said nor shown: \(client.output)")
        }
    }
}
