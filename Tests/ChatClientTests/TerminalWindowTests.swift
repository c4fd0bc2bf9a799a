import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// Writes `text` as the config file under `home` (where the client looks with HOME=home).
func writeConfig(_ text: String, home: URL) throws {
    let directory = home.appendingPathComponent(".config/chat-client")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    try text.write(to: directory.appendingPathComponent("config.toml"), atomically: true, encoding: .utf8)
}

extension TerminalTests {
    /// Windows that own their lines, scrollback, the config file and logs, in a real terminal.
    @Suite(.serialized) struct Windows {
        @Test func windowsOwnTheirLinesAndPageUpScrollsBack() async throws {
            try await TerminalTests.start(rooms: ["general", "dev"]) { _, tmux, bob, _ in
                for index in 1...40 { try await bob.say("line \(index)") }
                try await tmux.waitFor("<bob> line 40")
                try await tmux.press("PPage")
                try await tmux.waitFor("alice -- more -- |")
                try await tmux.waitForScreen("an earlier page") { rows in
                    rows.contains { $0.hasSuffix("<bob> line 15") } && !rows.contains { $0.hasSuffix("<bob> line 40") }
                }
                try await bob.say("while scrolled back")
                // bob's next line, in #dev, reaches the client after the one in #general: once
                // #dev counts it, the client has had the line that must stay out of view.
                try await bob.join("dev")
                try await bob.say("only in dev", in: "dev")
                try await tmux.waitFor("alice -- more -- | [1:#general] 2:#dev(1)")
                #expect(try await !tmux.screen().contains { $0.contains("while scrolled back") }, "the view stays where it was")
                try await tmux.press("NPage")
                try await tmux.press("NPage")
                try await tmux.waitFor("<bob> while scrolled back")
                try await tmux.waitFor("alice | [1:#general] 2:#dev(1)")
                try await tmux.press("M-2")
                try await tmux.waitFor("<bob> only in dev")
                #expect(try await !tmux.screen().contains { $0.contains("<bob> line 40") }, "#general's lines are not in #dev's window")
                try await tmux.press("M-1")
                try await tmux.waitFor("<bob> while scrolled back")
                #expect(try await !tmux.screen().contains { $0.contains("only in dev") })

                try await tmux.type("/lastlog LINE 3")
                try await tmux.press("Enter")
                try await tmux.waitFor("lastlog: 11 lines contain \"LINE 3\":")
                try await tmux.type("/clear")
                try await tmux.press("Enter")
                try await tmux.waitForScreen("an empty window") { rows in !rows.contains { $0.contains("<bob>") } }
                #expect(try await tmux.format("#{history_size}") == "0",
                        "the alternate screen keeps redraws out of the terminal's scrollback")
            }
        }

        /// A command entered while scrolled back shows its answer: /lastlog is how one looks for
        /// a line one was paging back for (the answer went below the view, unseen).
        @Test func aCommandEnteredWhileScrolledBackShowsItsAnswer() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                for index in 1...40 { try await bob.say("line \(index)") }
                try await tmux.waitFor("<bob> line 40")
                try await tmux.press("PPage")
                try await tmux.waitFor("alice -- more -- |")
                try await tmux.type("/lastlog line 17")
                try await tmux.press("Enter")
                try await tmux.waitForScreen("the answer, and no -- more --") { rows in
                    rows.contains { $0.hasSuffix("-- lastlog: 1 line contains \"line 17\":") }
                        && rows.contains { $0.hasPrefix("alice | [1:#general]") }
                }
            }
        }

        @Test func aResizeStormWhileScrolledBackKeepsTheViewAndTheLine() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                for index in 1...60 { try await bob.say("storm \(index)") }
                try await tmux.waitFor("<bob> storm 60")
                try await tmux.type("half typed")
                try await tmux.press("PPage")
                try await tmux.waitFor("alice -- more -- |")
                for round in 0..<30 {
                    try await tmux.tmux(["resize-window", "-x", "\(40 + round % 7 * 10)", "-y", "\(12 + round % 5 * 4)"])
                }
                try await tmux.tmux(["resize-window", "-x", "80", "-y", "24"])
                try await tmux.waitForInput("half typed", prompt: TerminalTests.prompt)
                try await tmux.waitFor("alice -- more -- |")
                #expect(try await !tmux.screen().contains { $0.contains("<bob> storm 60") }, "still scrolled back after the storm")
                try await tmux.press("NPage", "NPage", "NPage", "NPage")
                try await tmux.waitFor("<bob> storm 60")
                try await tmux.press("Enter")
                #expect(await bob.waitFor(TerminalTests.said("half typed", by: "alice")))
            }
        }

        @Test func aHiddenWindowTakesAFloodAndAHundredWindowsFitTheStatusLine() async throws {
            let rooms = (1...100).map { "room\($0)" }
            try await TerminalTests.start(serverArguments: ["--no-rate-limits", "--max-rooms-per-client", "200"], rooms: ["general"] + rooms,
                                          clientArguments: []) { server, tmux, bob, home in
                try await tmux.waitForScreen("a status line that counts the windows left out") { rows in
                    rows.contains { $0.hasPrefix("alice | [1:#general]") && $0.range(of: #" \+\d+$"#, options: .regularExpression) != nil }
                }
                let flooder = try await Peer(nick: "flood", port: server.port, room: "room100")
                defer { flooder.close() }
                for index in 1...3000 { try await flooder.say("flood \(index)", in: "room100") }
                try await tmux.waitForScreen("3000 unread in the hidden window") { rows in
                    rows.contains { $0.contains("101:#room100(3000)") }
                }
                try await bob.say("general still works")
                try await tmux.waitFor("<bob> general still works")
                try await tmux.type("/window 101")
                try await tmux.press("Enter")
                try await tmux.waitFor("<flood> flood 3000")
                _ = home
            }
        }

        /// A terminal too narrow for the current window's name and a mention's still shows the
        /// mention, scrolled back too: the windows go by number (it was cut off the line's end).
        @Test func aNarrowStatusLineStillShowsTheMention() async throws {
            try await TerminalTests.start(rooms: ["general", "dev"]) { _, tmux, bob, _ in
                for index in 1...12 { try await bob.say("filler \(index)") }
                try await tmux.waitFor("<bob> filler 12")
                try await bob.join("dev")
                try await bob.say("alice: look here", in: "dev")
                try await tmux.waitFor("alice | [1:#general] 2:#dev(1!)")
                try await TerminalTests.Scrolling.resize(tmux, columns: 30, rows: 10)
                try await tmux.waitForScreen("the mention by number") { rows in rows.contains { $0 == "alice | [1] 2(1!)" } }
                try await tmux.press("PPage")
                try await tmux.waitForScreen("the mention while scrolled back") { rows in rows.contains { $0 == "alice -- more -- | [1] 2(1!)" } }
                try await tmux.press("M-2")
                try await tmux.waitForInput("", prompt: "[#dev] ")
                try await TerminalTests.Scrolling.resize(tmux, columns: 80, rows: 24)
                try await tmux.waitFor("alice | 1:#general [2:#dev]")
            }
        }

        @Test func connectionCommandsListingsAndCompletion() async throws {
            try await TerminalTests.start { server, tmux, bob, _ in
                try await tmux.type("/who #nosuch")
                try await tmux.press("Enter")
                try await tmux.waitForScreen("an error for a room that is not there") { rows in
                    rows.contains { $0.contains("!! ") && $0.contains("nosuch") } && !rows.contains { $0.contains("members (0)") }
                }
                try await bob.join("dev")
                try await tmux.type("/list")
                try await tmux.press("Enter")
                try await tmux.waitFor("-- 2 rooms:")
                try await tmux.waitFor("-- #dev      1 member")
                try await tmux.waitFor("-- #general  2 members")
                try await tmux.type("/join #d")
                try await tmux.press("Tab")
                try await tmux.waitForInput("/join #dev ", prompt: TerminalTests.prompt)
                try await tmux.press("C-u")
                try await tmux.type("/msg b")
                try await tmux.press("Tab")
                try await tmux.waitForInput("/msg bob ", prompt: TerminalTests.prompt)
                try await tmux.press("C-u")

                try await tmux.type("/disconnect")
                try await tmux.press("Enter")
                try await tmux.waitFor("disconnected from 127.0.0.1:\(server.port); /reconnect connects again")
                try await tmux.waitFor("alice | [1:#general] | offline")
                try await bob.say("while you were out")
                try await tmux.type("/reconnect")
                try await tmux.press("Enter")
                try await tmux.waitFor("-- reconnected to 127.0.0.1:\(server.port): 1 room, 1 new message")
                try await tmux.waitFor("<bob> while you were out")
                try await tmux.type("/names")
                try await tmux.press("Enter")
                try await tmux.waitFor("-!- members (2): ")
                try await tmux.type("/whois bob")
                try await tmux.press("Enter")
                try await tmux.waitFor("-- bob is in #general")
            }
        }

        @Test func aConfigFileSetsTheClientUpAndLogsAreWritten() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            try writeConfig("""
                nick = "alice"
                servers = ["127.0.0.1:\(server.port)"]
                autojoin = ["#general", "#dev"]
                timestamp_format = "%H:%M:%S"
                highlight = ["deploy"]
                log = true

                [aliases]
                wc = "window close"
                """, home: home)
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", home: home, rooms: []).replacingOccurrences(of: "'--nick' 'alice'", with: ""))
            defer { tmux.stop() }
            try await tmux.waitFor("alice | [1:#general] 2:#dev")
            let bob = try await Peer(nick: "bob", port: server.port, room: "dev")
            defer { bob.close() }
            try await bob.say("the deploy is done", in: "dev")
            try await tmux.waitFor("alice | [1:#general] 2:#dev(1!)")
            try await tmux.press("M-2")
            try await tmux.waitForScreen("a timestamp with seconds") { rows in
                rows.contains { $0.range(of: #"^\d\d:\d\d:\d\d <bob> the deploy is done$"#, options: .regularExpression) != nil }
            }
            let log = home.appendingPathComponent(".local/share/chat-client/logs/127.0.0.1:\(server.port)/#dev.log")
            #expect(await eventually { ((try? String(contentsOf: log, encoding: .utf8)) ?? "").contains(" <bob> the deploy is done") },
                    "the log has the line")
            // /lastlog shows copies of lines that are already in the window and its log: the
            // copies are not logged again, nor found by the next /lastlog.
            for answers in 1...2 {
                try await tmux.type("/lastlog deploy")
                try await tmux.press("Enter")
                try await tmux.waitForScreen("answer \(answers) of one line") { rows in
                    rows.filter { $0.contains("-- lastlog: ") }.count == answers
                }
            }
            #expect(try await tmux.screen().filter { $0.hasSuffix("-- lastlog: 1 line contains \"deploy\":") }.count == 2,
                    "the second search does not find the first one's answer")
            try await bob.say("after the search", in: "dev")
            #expect(await eventually { ((try? String(contentsOf: log, encoding: .utf8)) ?? "").contains(" <bob> after the search") })
            let searched = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
            #expect(!searched.contains("lastlog") && searched.components(separatedBy: "the deploy is done").count == 2,
                    "the log holds the line once and none of /lastlog's answer:\n\(searched)")
            let mode = try FileManager.default.attributesOfItem(atPath: log.path)[.posixPermissions] as? Int
            #expect(mode == 0o600, "the log is private: \(String(mode ?? 0, radix: 8))")
            let logged = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
            #expect(logged.range(of: #"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d "#, options: .regularExpression) != nil, "lines carry date and time: \(logged)")

            try await tmux.type("/set buffer_lines 50")
            try await tmux.press("Enter")
            try await tmux.waitFor("buffer_lines = 50 for this session")
            try await tmux.type("/save")
            try await tmux.press("Enter")
            try await tmux.waitFor("settings saved to")
            let saved = try String(contentsOf: home.appendingPathComponent(".config/chat-client/config.toml"), encoding: .utf8)
            #expect(saved.contains("buffer_lines = 50") && saved.contains("wc = \"window close\""), "\(saved)")
            // A new log directory takes the next line.
            try await tmux.type("/set log_directory \(home.path)/elsewhere")
            try await tmux.press("Enter")
            try await tmux.waitForLogicalLine(containing: "log_directory = \"\(home.path)/elsewhere\" for this session")
            try await bob.say("logged elsewhere", in: "dev")
            let moved = home.appendingPathComponent("elsewhere/127.0.0.1:\(server.port)/#dev.log")
            #expect(await eventually { ((try? String(contentsOf: moved, encoding: .utf8)) ?? "").contains(" <bob> logged elsewhere") },
                    "the line is logged in the new directory")
            try await tmux.type("/wc")
            try await tmux.press("Enter")
            try await tmux.waitFor("alice | [1:#general]")
        }

        /// The config file's [tls] (mode "ca", ca_file under ~) against a real TLS server, with
        /// no TLS flag given: verified, and said so in the status line.
        @Test func theConfigFilesTLSSettingsConnectVerified() async throws {
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("Scripts/dev-cert.sh")
            let certificates = home.appendingPathComponent("certs")
            let issue = try ChildProcess(script, ["--out", certificates.path])
            #expect(await issue.waitForExit() == 0, "dev-cert.sh made a CA and a certificate for localhost: \(issue.output)")
            try FileManager.default.copyItem(at: certificates.appendingPathComponent("ca.pem"), to: home.appendingPathComponent("ca.pem"))
            let server = try await ChatServerProcess(arguments: [
                "--tls-cert", certificates.appendingPathComponent("server.pem").path,
                "--tls-key", certificates.appendingPathComponent("server-key.pem").path,
            ])
            defer { server.stop() }
            try writeConfig("""
                servers = ["localhost:\(server.port)"]

                [tls]
                mode = "ca"
                ca_file = "~/ca.pem"
                """, home: home)
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice joined")
            try await tmux.waitFor("alice | [1:#general] | TLS 1.3")
            #expect(try await !tmux.screen().contains { $0.contains("UNVERIFIED") || $0.contains("NOT verified") })
        }

        @Test func theMergedWindowShowsEveryWindowsLines() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            try writeConfig("merged_window = true\n", home: home)
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home, rooms: ["general", "dev"]))
            defer { tmux.stop() }
            try await tmux.waitFor("alice | [1:(all)] 2:#general 3:#dev")
            let bob = try await Peer(nick: "bob", port: server.port, room: "dev")
            defer { bob.close() }
            try await bob.say("said in dev", in: "dev")
            try await bob.tell("alice", "and in private")
            try await tmux.waitFor("#dev <bob> said in dev")  // the merged window names rooms
            try await tmux.waitFor("*bob* and in private")
            try await tmux.waitFor("alice | [1:(all)] 2:#general 3:#dev 4:bob")
            try await tmux.press("M-2")
            try await tmux.waitForInput("", prompt: "[#general] ")
            #expect(try await !tmux.screen().contains { $0.contains("said in dev") }, "#general shows only its own lines")
        }

        @Test func aMalformedConfigNamesTheLineAndStartsNothing() async throws {
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            try writeConfig("nick = \"alice\"\n\nbuffer_lines = lots\n", home: home)
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: 1, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("EXIT=1")
            try await tmux.waitForLogicalLine(containing: "config.toml line 3: \"lots\" is not a value")
            try await TerminalTests.expectSaneTerminal(tmux)
        }

        /// Names and addresses in the file are checked with its lines: a bad nick, room or server
        /// was refused after the file was read, without its line, and a bad nick only when no
        /// --nick stood in for it (the usage error of a flag, exit status 64).
        @Test(arguments: [
            ("nick = \"alice\"\n\nnick2 = 1\n", "line 3: unknown setting nick2"),
            ("# mine\nnick = \"9lives\"\n", "line 2: \"9lives\" is not a valid nick"),
            ("autojoin = [\"#general\"]\nautojoin2 = []\n", "line 2: unknown setting autojoin2"),
            ("\nautojoin = [\"#general\", \"#no room\"]\n", "line 2: autojoin: \"#no room\" is not a valid room"),
            ("servers = [\"127.0.0.1\"]\n", "line 1: servers: 127.0.0.1: expected HOST:PORT"),
            ("[colours]\n", "line 1: unknown table [colours]"),
        ])
        func aBadValueInTheConfigNamesItsLineAndStartsNothing(text: String, expected: String) async throws {
            let directory = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: directory) }
            let file = directory.appendingPathComponent("config.toml")
            try text.write(to: file, atomically: true, encoding: .utf8)
            let child = try pipeClient(["--config", file.path, "--port", "1"])
            defer { child.stop() }
            let status = await child.waitForExit()
            #expect(status == 1)
            #expect(child.output.hasPrefix("chat-client: \(file.path) \(expected)")
                    && child.output.hasSuffix("; nothing was started\n") && child.output.split(separator: "\n").count == 1,
                    "one line naming the file and the line: \(child.output)")
        }

        @Test func anUnwritableLogDirectoryGivesOneNoteAndChatGoesOn() async throws {
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            try writeConfig("log = true\nlog_directory = \"/proc/chat-client-logs\"\n", home: home)
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("cannot write the log")
            let bob = try await Peer(nick: "bob", port: server.port)
            defer { bob.close() }
            try await bob.say("still chatting")
            try await tmux.waitFor("<bob> still chatting")
            #expect(try await tmux.screen().filter { $0.contains("cannot write the log") }.count == 1, "one note")
        }

        /// What a client started into a server that already has rooms sees and can do: its room's
        /// backlog above `— live from here —`, Tab after `/join #` offering a room only the
        /// connect-time room list named, `/rooms` one a line with its topic, `/switch` and `/window`
        /// (`/w`, `/win`) going to a query (`/q`) and back by name, and `/server` moving to another
        /// server.
        @Test func aServerWithRoomsAlreadyThereSwitchingByNameAndServer() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let other = try await ChatServerProcess()
            defer { other.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            // Before alice starts: a line in #general, and a room with a topic she is not in.
            let carol = try await Peer(nick: "carol", port: server.port)
            defer { carol.close() }
            try await carol.say("said before you came")
            try await carol.join("ops")
            try await carol.connection.send(.setTopic(room: "ops", text: "incidents only"))
            #expect(await carol.waitFor { if case .topic("ops", _, _, _, "incidents only") = $0 { true } else { false } })
            #expect(await carol.waitFor(TerminalTests.said("said before you came", by: "carol")))

            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home))
            defer { tmux.stop() }
            try await tmux.waitForScreen("the backlog, then the marker where live lines start") { rows in
                guard let said = rows.firstIndex(where: { $0.hasSuffix("<carol> said before you came") }),
                    let live = rows.firstIndex(where: { $0.hasSuffix("— live from here —") })
                else { return false }
                return said < live
            }
            // Nothing but the room list alice's client asked for at connect time names #ops.
            try await tmux.type("/join #o")
            try await tmux.press("Tab")
            try await tmux.waitForInput("/join #ops ", prompt: TerminalTests.prompt)
            try await tmux.press("C-u")
            try await tmux.type("/rooms")
            try await tmux.press("Enter")
            try await tmux.waitFor("-- 2 rooms:")
            try await tmux.waitForScreen("#ops on a line of its own, with its member count and topic") { rows in
                rows.contains { $0.range(of: #"-- #ops +1 member +incidents only$"#, options: .regularExpression) != nil }
            }

            // A query, left and found again by name with /switch and /window.
            try await tmux.type("/q carol")
            try await tmux.press("Enter")
            try await tmux.waitForInput("", prompt: "[carol] ")
            let switches = [
                ("/switch #general", TerminalTests.prompt), ("/switch carol", "[carol] "), ("/w #general", TerminalTests.prompt),
                ("/win carol", "[carol] "),
            ]
            for (command, prompt) in switches {
                try await tmux.type(command)
                try await tmux.press("Enter")
                try await tmux.waitForInput("", prompt: prompt)
            }
            try await tmux.press("M-1")

            // /server: to another server, which becomes the only one; #general is joined there.
            let dave = try await Peer(nick: "dave", port: other.port)
            defer { dave.close() }
            try await tmux.type("/server 127.0.0.1:\(other.port)")
            try await tmux.press("Enter")
            #expect(await dave.waitFor { if case .joined("general", _, _, "alice") = $0 { true } else { false } },
                    "alice joined #general on the other server")
            try await tmux.waitForLogicalLine(containing: "reconnected to 127.0.0.1:\(other.port)")
            try await dave.say("on the other server")
            try await tmux.waitFor("<dave> on the other server")
            try await tmux.type("moved")
            try await tmux.press("Enter")
            #expect(await dave.waitFor(TerminalTests.said("moved", by: "alice")), "alice talks on the other server")
            #expect(!carol.frames.contains { if case .message(_, _, _, "alice", "moved") = $0 { true } else { false } },
                    "and no longer on the first")
        }

        /// `buffer_lines` bounds what the real client keeps: 200 lines into a window of 50, and
        /// paging back stops at the 151st.
        @Test func aWindowKeepsItsBufferLinesAndNoMore() async throws {
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            try writeConfig("buffer_lines = 50\ntimestamp_format = \"-\"\n", home: home)
            let server = try await ChatServerProcess(arguments: ["--no-rate-limits"])
            defer { server.stop() }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice joined")
            let bob = try await Peer(nick: "bob", port: server.port)
            defer { bob.close() }
            for index in 1...200 { try await bob.say("kept \(index)") }
            try await tmux.waitFor("- <bob> kept 200")
            for _ in 0..<6 { try await tmux.press("PPage") }
            try await tmux.waitForScreen("the oldest line kept at the top, the 151st") { rows in
                rows.first == "- <bob> kept 151" && rows.contains { $0.hasPrefix("alice -- more --") }
            }
        }

        @Test func aConfigNamingFiveHundredRoomsJoinsThemAll() async throws {
            let server = try await ChatServerProcess(arguments: ["--no-rate-limits", "--max-rooms-per-client", "600"])
            defer { server.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let rooms = (1...500).map { "\"#r\($0)\"" }.joined(separator: ", ")
            try writeConfig("autojoin = [\(rooms)]\n", home: home)
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home, rooms: []))
            defer { tmux.stop() }
            try await tmux.waitForScreen("500 windows, most of them left out") { rows in
                rows.contains { $0.hasPrefix("alice | [1:#r1]") && $0.range(of: #" \+4\d\d$"#, options: .regularExpression) != nil }
            }
            let bob = try await Peer(nick: "bob", port: server.port, room: "r500")
            defer { bob.close() }
            #expect(await bob.waitFor { frame in
                switch frame {
                case .joined("r500", _, _, "alice"): true
                case .members("r500", let nicks), .membersPage("r500", _, let nicks): nicks.contains("alice")
                default: false
                }
            }, "alice's 500th join went through")
            try await bob.say("alice: in the last room", in: "r500")
            try await tmux.waitFor("500:#r500(1!)")
        }
    }
}
