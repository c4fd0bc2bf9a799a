import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

extension TerminalTests {
    /// Accounts made or logged into at the prompt, against the real server in its default
    /// (durable) mode: the client logs in again by itself after restarts and after being ghosted,
    /// with the password it holds in memory only (docs/CLIENT.md, "Logging in again").
    @Suite(.serialized) struct Accounts {
        /// Registers `nick` with `password` over the protocol, as another client of the same user
        /// did earlier, and leaves.
        static func registerAccount(_ nick: String, password: String, port: Int) async throws {
            let owner = try await Peer(nick: nick, port: port, room: nil, version: WireProtocol.version)
            defer { owner.close() }
            try await owner.connection.send(.register(password: password))
            #expect(await owner.waitFor { if case .registered(nick) = $0 { true } else { false } }, "\(nick) is registered")
        }

        /// Whether a frame is a member list of `room` that holds `nick` (any version's form).
        static func listsMember(_ nick: String, in room: String) -> (Frame) -> Bool {
            { frame in
                switch frame {
                case .members(room, let nicks), .membersPage(room, _, let nicks): nicks.contains { $0.hasSuffix(nick) }
                default: false
                }
            }
        }

        /// Types `password` at the hidden prompt `prompt` asks for, and Enter.
        static func answer(_ tmux: TmuxSession, prompt: String, with password: String) async throws {
            try await tmux.waitFor(prompt)
            try await tmux.type(password)
            try await tmux.press("Enter")
        }

        /// `/register` at the prompt (the password twice), then a SIGTERM restart and a SIGKILL
        /// restart on the same data directory: the client logs in again each time, keeps its
        /// windows, scrollback and half-typed line, and never exits.
        @Test func anAccountRegisteredAtThePromptSurvivesSIGTERMAndSIGKILLRestarts() async throws {
            let data = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: data) }
            let storage = ["--data-dir", data.path]
            var server = try await ChatServerProcess(arguments: storage)
            defer { server.stop() }
            let port = server.port
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let tmux = try await TmuxSession(
                try clientInTerminal(nick: "erin", port: port, home: home, rooms: ["general", "dev"]), rows: 50)
            defer { tmux.stop() }
            try await tmux.waitFor("-!- erin joined")
            try await tmux.type("/register")
            try await tmux.press("Enter")
            try await Self.answer(tmux, prompt: "password for erin (not shown", with: "s3cret-erin")
            try await Self.answer(tmux, prompt: "the same password again", with: "s3cret-erin")
            try await tmux.waitFor("registered the account erin; you are logged in as it")
            try await tmux.type("said before the restarts")
            try await tmux.press("Enter")
            try await tmux.waitFor("<erin> said before the restarts")
            try await tmux.type("half typed")

            for (index, how) in ["SIGTERM", "SIGKILL"].enumerated() {
                if how == "SIGTERM" { server.child.stop() } else { server.child.killNow() }
                try await tmux.waitForLogicalLine(containing: "disconnected:")
                server = try await ChatServerProcess(port: port, arguments: storage)
                try await tmux.waitForScreen("logged in again after the \(how) restart") { rows in
                    rows.filter { $0.contains("logged in as erin") }.count == index + 1
                }
                try await tmux.waitFor("reconnected to 127.0.0.1:\(port)")
                let bob = try await Peer(nick: "bob", port: port, room: nil, version: WireProtocol.version)
                defer { bob.close() }
                try await bob.join("general")
                #expect(await bob.waitFor(Self.listsMember("erin", in: "general")), "erin is back in #general under her own nick after the \(how) restart")
                try await tmux.waitForInput("half typed", prompt: "[#general] ")
                let rows = try await tmux.screen()
                #expect(!rows.contains { $0.hasPrefix("EXIT=") }, "the client is still running:\n\(rows.joined(separator: "\n"))")
                #expect(rows.contains { $0.contains("<erin> said before the restarts") }, "the scrollback is kept:\n\(rows.joined(separator: "\n"))")
                #expect(rows.contains { $0.hasPrefix("erin | [1:#general] 2:#dev") }, "both windows, as erin:\n\(rows.joined(separator: "\n"))")
            }
            try await tmux.press("M-2")
            try await tmux.waitForInput("half typed", prompt: "[#dev] ")
        }

        /// `/login` at the prompt does the same: a guest that logged in survives a restart.
        @Test func aLoginAtThePromptSurvivesARestart() async throws {
            let data = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: data) }
            let storage = ["--data-dir", data.path]
            var server = try await ChatServerProcess(arguments: storage)
            defer { server.stop() }
            let port = server.port
            try await Self.registerAccount("erin", password: "s3cret-erin", port: port)
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "erin", port: port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("the nick erin is a registered nick; trying erin_")
            try await tmux.waitFor("-!- erin_ joined")
            try await tmux.type("/login erin")
            try await tmux.press("Enter")
            try await Self.answer(tmux, prompt: "password for erin (not shown", with: "s3cret-erin")
            try await tmux.waitFor("logged in as erin")
            try await tmux.waitFor("erin | [1:#general]")
            try await tmux.type("half typed")

            server.child.stop()
            try await tmux.waitForLogicalLine(containing: "disconnected:")
            server = try await ChatServerProcess(port: port, arguments: storage)
            try await tmux.waitFor("reconnected to 127.0.0.1:\(port)")
            try await tmux.waitForInput("half typed", prompt: "[#general] ")
            let rows = try await tmux.screen()
            #expect(!rows.contains { $0.contains("the server refused us") || $0.hasPrefix("EXIT=") }, "\(rows.joined(separator: "\n"))")
            #expect(rows.contains { $0.hasPrefix("erin | [1:#general]") }, "still erin:\n\(rows.joined(separator: "\n"))")
        }

        /// Ghosted by another login to the same account, the session stays offline; `/reconnect`
        /// logs in again and takes the nick back (the other session is ghosted in turn).
        @Test func aGhostedSessionThatReconnectsGetsItsNickBackByLoggingIn() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            try await Self.registerAccount("alice", password: "pw-alice", port: server.port)
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice_ joined")
            try await tmux.type("/login alice")
            try await tmux.press("Enter")
            try await Self.answer(tmux, prompt: "password for alice (not shown", with: "pw-alice")
            try await tmux.waitFor("logged in as alice")

            // carol logs in to alice's account elsewhere: this session is ghosted.
            let carol = try await Peer(nick: "carol", port: server.port, room: nil, version: WireProtocol.version)
            defer { carol.close() }
            try await carol.connection.send(.login(account: "alice", password: "pw-alice"))
            #expect(await carol.waitFor { if case .loggedIn("alice") = $0 { true } else { false } }, "carol's session logged in")
            try await tmux.waitForLogicalLine(containing: "not reconnecting by itself (/reconnect to try again)")
            try await tmux.type("/reconnect")
            try await tmux.press("Enter")
            #expect(await carol.waitFor { if case .error(.ghosted, true, _, _) = $0 { true } else { false } },
                    "the reconnect logged in and ghosted the other session")
            try await tmux.waitFor("alice | [1:#general]")
            try await tmux.waitFor("reconnected to 127.0.0.1:\(server.port)")
            let rows = try await tmux.screen()
            #expect(!rows.contains { $0.contains("the server refused us") || $0.hasPrefix("EXIT=") }, "\(rows.joined(separator: "\n"))")
        }

        /// With no password known (the account was changed elsewhere), a refusal of the nick at a
        /// reconnect does not end the client: it goes on as a guest and says how to log in.
        @Test func aRegisteredNickWithNoKnownPasswordKeepsTheClientUp() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let relay = try TCPRelay(to: server.port)
            defer { relay.stop() }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "dora", port: relay.port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- dora joined")
            let bob = try await Peer(nick: "bob", port: server.port)
            defer { bob.close() }
            try await tmux.type("said as a guest")
            try await tmux.press("Enter")
            try await tmux.waitFor("<dora> said as a guest")
            try await tmux.type("half typed")
            // The connection drops, and meanwhile someone registers dora.
            relay.refusesConnections = true
            relay.cutAll()
            try await tmux.waitForLogicalLine(containing: "disconnected:")
            #expect(await bob.waitFor { if case .quit("general", _, _, "dora", _) = $0 { true } else { false } }, "the server saw dora go")
            try await Self.registerAccount("dora", password: "not-yours", port: server.port)
            relay.refusesConnections = false
            try await tmux.waitForLogicalLine(containing: "dora is a registered nick")
            try await tmux.waitFor("/login dora")
            try await tmux.waitFor("dora_ | [1:#general]")
            try await tmux.waitForInput("half typed", prompt: "[#general] ")
            let rows = try await tmux.screen()
            #expect(!rows.contains { $0.hasPrefix("EXIT=") }, "\(rows.joined(separator: "\n"))")
            #expect(rows.contains { $0.contains("<dora> said as a guest") }, "the scrollback is kept:\n\(rows.joined(separator: "\n"))")
        }

        /// The password the client holds stops working (changed from another session): the
        /// login refused at the reconnect is forgotten, and the client goes on as a guest, with
        /// its windows, rather than end.
        @Test func aLoginRefusedAtAReconnectIsForgottenAndTheClientGoesOnAsAGuest() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            try await Self.registerAccount("alice", password: "pw-old", port: server.port)
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice_ joined")
            try await tmux.type("/login alice")
            try await tmux.press("Enter")
            try await Self.answer(tmux, prompt: "password for alice (not shown", with: "pw-old")
            try await tmux.waitFor("logged in as alice")

            // Another session of alice's logs in (ghosting this one) and changes the password.
            let other = try await Peer(nick: "other", port: server.port, room: nil, version: WireProtocol.version)
            defer { other.close() }
            try await other.connection.send(.login(account: "alice", password: "pw-old"))
            #expect(await other.waitFor { if case .loggedIn("alice") = $0 { true } else { false } })
            try await other.connection.send(.changePassword(old: "pw-old", new: "pw-new"))
            #expect(await other.waitFor { if case .passwordChanged("alice") = $0 { true } else { false } })
            other.close()
            try await tmux.waitForLogicalLine(containing: "not reconnecting by itself")
            try await tmux.type("/reconnect")
            try await tmux.press("Enter")
            try await tmux.waitForLogicalLine(containing: "the server refused the login to alice")
            try await tmux.waitForLogicalLine(containing: "going on as alice_ (/login alice to take it back)")
            try await tmux.waitFor("alice_ | [1:#general]")
            let rows = try await tmux.screen()
            #expect(!rows.contains { $0.hasPrefix("EXIT=") }, "the client is still running:\n\(rows.joined(separator: "\n"))")
        }

        /// `/register` asks twice, and two different answers send nothing; a password typed on
        /// the command line is refused and kept out of the history file.
        @Test func registerConfirmsThePasswordAndAPasswordOnTheLineIsNotKept() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let history = home.appendingPathComponent("history")
            let tmux = try await TmuxSession(
                try clientInTerminal(nick: "alice", port: server.port, home: home, extra: ["--history-file", history.path]))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice joined")

            try await tmux.type("/register hunter2")
            try await tmux.press("Enter")
            try await tmux.waitFor("usage: /register")
            try await tmux.type("/help register")
            try await tmux.press("Enter")
            #expect(await eventually { (try? String(contentsOf: history, encoding: .utf8))?.contains("/help") == true }, "the history is saved")
            let saved = try String(contentsOf: history, encoding: .utf8)
            #expect(!saved.contains("hunter2"), "a password typed on the line is not kept: \(saved)")

            try await tmux.type("/register")
            try await tmux.press("Enter")
            try await Self.answer(tmux, prompt: "password for alice (not shown", with: "first-try")
            try await Self.answer(tmux, prompt: "the same password again", with: "second-try")
            try await tmux.waitFor("the two passwords differ: nothing was sent")
            try await tmux.type("/register")
            try await tmux.press("Enter")
            try await Self.answer(tmux, prompt: "password for alice (not shown", with: "same-twice")
            try await Self.answer(tmux, prompt: "the same password again", with: "same-twice")
            try await tmux.waitFor("registered the account alice")
            #expect(try await !tmux.screen().contains { $0.contains("first-try") || $0.contains("second-try") || $0.contains("same-twice") },
                    "no password is drawn")
        }

        /// `/password` asks the current password, then the new one twice, at the hidden prompt;
        /// `/unregister` asks a yes first, and a no keeps the account.
        @Test func passwordAndUnregisterAskAtTheHiddenPromptAndUnregisterAsksFirst() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            try await Self.registerAccount("alice", password: "first-secret", port: server.port)
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "carol", port: server.port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- carol joined")
            try await tmux.type("/login alice")
            try await tmux.press("Enter")
            try await Self.answer(tmux, prompt: "password for alice (not shown", with: "first-secret")
            try await tmux.waitFor("logged in as alice")

            try await tmux.type("/password")
            try await tmux.press("Enter")
            try await Self.answer(tmux, prompt: "password for alice (not shown", with: "first-secret")
            try await Self.answer(tmux, prompt: "new password for alice", with: "second-secret")
            try await Self.answer(tmux, prompt: "the same new password again", with: "second-secret")
            try await tmux.waitFor("the password of alice is changed")

            try await tmux.type("/unregister")
            try await tmux.press("Enter")
            try await tmux.waitFor("delete the account alice for good?")
            try await tmux.type("n")
            try await tmux.waitFor("the account alice is kept")
            try await tmux.type("/unregister")
            try await tmux.press("Enter")
            try await tmux.waitFor("delete the account alice for good?")
            try await tmux.type("y")
            try await Self.answer(tmux, prompt: "password for alice (not shown", with: "second-secret")
            try await tmux.waitFor("the account alice is deleted; you keep the nick as a guest")
            #expect(try await !tmux.screen().contains { $0.contains("first-secret") || $0.contains("second-secret") }, "no password is drawn")
        }

        /// Offline, an account command says the client is not connected — not that the server
        /// has no accounts — and asks for no password it could not send; text typed says
        /// whether the client is still trying to connect, or is not reconnecting by itself.
        @Test func accountCommandsOfflineSayNotConnectedAndAskNothing() async throws {
            let gone = try await ChatServerProcess()
            let deadPort = gone.port
            gone.stop()
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let never = try await TmuxSession(try clientInTerminal(nick: "eve", port: deadPort, home: home))
            defer { never.stop() }
            try await never.waitForLogicalLine(containing: "reconnecting in")
            try await never.type("/register")
            try await never.press("Enter")
            try await never.waitForLogicalLine(containing: "/register needs the server")
            try await never.type("hello")
            try await never.press("Enter")
            try await never.waitForLogicalLine(containing: "not sent (still trying to connect)")
            let neverRows = try await never.screen()
            #expect(!neverRows.contains { $0.contains("protocol version") || $0.contains("password for") },
                    "no server answered, and nothing was asked:\n\(neverRows.joined(separator: "\n"))")
            never.stop()

            let server = try await ChatServerProcess()
            defer { server.stop() }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "eve", port: server.port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- eve joined")
            try await tmux.type("/disconnect")
            try await tmux.press("Enter")
            try await tmux.waitForLogicalLine(containing: "/reconnect connects again")
            try await tmux.type("/login")
            try await tmux.press("Enter")
            try await tmux.waitForLogicalLine(containing: "/login needs the server")
            try await tmux.type("hello")
            try await tmux.press("Enter")
            try await tmux.waitForLogicalLine(containing: "not sent (not reconnecting by itself")
            let rows = try await tmux.screen()
            #expect(!rows.contains { $0.contains("password for") || $0.contains("(reconnecting)") },
                    "refused before asking, and not said to be reconnecting:\n\(rows.joined(separator: "\n"))")
        }

        /// `/login` with no account offers the nick the client was started with, not the `_`
        /// fallback it got because that nick is registered.
        @Test func loginWithNoAccountOffersTheConfiguredNick() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            try await Self.registerAccount("alice", password: "pw-alice", port: server.port)
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice_ joined")
            try await tmux.type("/login")
            try await tmux.press("Enter")
            try await Self.answer(tmux, prompt: "password for alice (not shown", with: "pw-alice")
            try await tmux.waitFor("logged in as alice")
            try await tmux.waitFor("alice | [1:#general]")
        }
    }
}
