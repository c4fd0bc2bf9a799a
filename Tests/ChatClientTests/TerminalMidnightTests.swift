import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

extension TerminalTests {
    /// A real run across midnight: the client runs under a time zone (`TZ`, a POSIX offset with
    /// seconds) whose midnight is a few seconds away, so nothing in the client is faked.
    @Suite(.serialized) struct Midnight {
        /// A POSIX `TZ` whose local midnight falls at `instant` (seconds since 1970), and the
        /// zone's offset east of UTC in seconds. POSIX writes offsets west, so east is `-`.
        static func zone(midnightAt instant: Int) -> (tz: String, east: Int) {
            var east = (86_400 - instant % 86_400) % 86_400
            if east > 43_200 { east -= 86_400 }
            let magnitude = abs(east)
            let offset = String(format: "%02d:%02d:%02d", magnitude / 3600, magnitude / 60 % 60, magnitude % 60)
            return ("TST" + (east >= 0 ? "-" : "+") + offset, east)
        }

        /// `YYYY-MM-DD` and the weekday of `local`, a wall-clock time as seconds since 1970.
        static func date(_ local: Int) -> (day: String, weekday: String) {
            let formatter = DateFormatter()
            formatter.timeZone = TimeZone(identifier: "UTC")
            formatter.locale = Locale(identifier: "en_US_POSIX")
            let date = Date(timeIntervalSince1970: TimeInterval(local))
            formatter.dateFormat = "yyyy-MM-dd"
            let day = formatter.string(from: date)
            formatter.dateFormat = "EEEE"
            return (day, formatter.string(from: date))
        }

        @Test func theDayChangesAtLocalMidnightOnScreenAndInTheLogs() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            try writeConfig("timestamp_format = \"%H:%M:%S\"\nlog = true\n", home: home)

            // Local midnight 20 s from now. bob's line before it is said first, so that it is
            // stamped well before midnight however long the client takes to start: the client shows
            // it from the room's history when it joins, in its window and its log, as a live one.
            let midnight = Int(Date().timeIntervalSince1970) + 20
            let (tz, east) = Self.zone(midnightAt: midnight)
            let old = Self.date(midnight - 1 + east)
            let new = Self.date(midnight + east)
            let bob = try await Peer(nick: "bob", port: server.port)
            defer { bob.close() }
            try await bob.say("before midnight")
            #expect(await bob.waitFor(TerminalTests.said("before midnight", by: "bob")), "bob's line is echoed")
            let stamped = bob.frames.compactMap { frame -> UInt64? in
                if case .message(_, _, let time, "bob", "before midnight") = frame { time } else { nil }
            }.first ?? .max
            guard stamped < UInt64(midnight) * 1000 else {
                Issue.record("bob's line took more than 20 s to be said: it is stamped after midnight (TZ=\(tz))")
                return
            }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home, environment: ["TZ": tz]))
            defer { tmux.stop() }
            try await tmux.waitFor("<bob> before midnight")

            // The wall clock is the event waited for: the zone's midnight, and a second more.
            let remaining = Double(midnight + 1) - Date().timeIntervalSince1970
            if remaining > 0 { try await Task.sleep(for: .milliseconds(Int(remaining * 1000))) }
            try await bob.say("after midnight")
            let dayChange = "-- day changed to \(new.day) (\(new.weekday))"
            try await tmux.waitForScreen("the day-change line between the two messages") { rows in
                guard let before = rows.firstIndex(where: { $0.hasPrefix("23:59:") && $0.hasSuffix("<bob> before midnight") }),
                    let change = rows.firstIndex(where: { $0 == dayChange }),
                    let after = rows.firstIndex(where: { $0.hasPrefix("00:00:") && $0.hasSuffix("<bob> after midnight") })
                else { return false }
                return before < change && change < after
            }

            // The old day's log was moved aside under its date; the new day's lines go to a file of
            // their own, both readable by alice alone.
            let logs = home.appendingPathComponent(".local/share/chat-client/logs/127.0.0.1:\(server.port)")
            let current = logs.appendingPathComponent("#general.log")
            let previous = logs.appendingPathComponent("#general.\(old.day).log")
            let rotated = await eventually(timeout: .seconds(30)) {
                ((try? String(contentsOf: current, encoding: .utf8)) ?? "").contains("after midnight")
            }
            #expect(rotated, "#general.log gets the new day's lines")
            let oldText = (try? String(contentsOf: previous, encoding: .utf8)) ?? ""
            let newText = (try? String(contentsOf: current, encoding: .utf8)) ?? ""
            let files = ((try? FileManager.default.contentsOfDirectory(atPath: logs.path)) ?? []).filter { $0.hasPrefix("#general") }.sorted()
            #expect(files == ["#general.\(old.day).log", "#general.log"], "one file a day: \(files)")
            #expect(oldText.contains("\(old.day) 23:59:") && oldText.contains(" <bob> before midnight"), "the old day's file:\n\(oldText)")
            #expect(!oldText.contains("after midnight"), "the old day's file is closed at midnight:\n\(oldText)")
            #expect(newText.contains("\(new.day) 00:00:") && newText.contains(" <bob> after midnight"), "the new day's file:\n\(newText)")
            #expect(newText.contains(dayChange), "the new file starts with the day-change line:\n\(newText)")
            #expect(!newText.contains("before midnight"), "the new day's file:\n\(newText)")
            for file in [current, previous] {
                var status = stat()
                #expect(stat(file.path, &status) == 0 && status.st_mode & 0o777 == 0o600, "\(file.lastPathComponent) is mode 0600")
            }

            try await tmux.type("/quit")
            try await tmux.press("Enter")
            try await tmux.waitFor("EXIT=0")
            try await TerminalTests.expectSaneTerminal(tmux)

            // The morning after: a new start shows its join (today), then the room's backlog from
            // yesterday, then today's lines again. Yesterday's file must keep yesterday's session;
            // it was moved over by a file holding the backlog alone (rename replaces its target).
            let again = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home, environment: ["TZ": tz]))
            defer { again.stop() }
            try await again.waitFor("— live from here —")
            try await bob.say("the next morning")
            try await again.waitFor("<bob> the next morning")
            #expect(await eventually(timeout: .seconds(30)) {
                ((try? String(contentsOf: current, encoding: .utf8)) ?? "").contains("the next morning")
            }, "today's file gets the new session's lines")
            let filesAfter = ((try? FileManager.default.contentsOfDirectory(atPath: logs.path)) ?? []).filter { $0.hasPrefix("#general") }.sorted()
            #expect(filesAfter == ["#general.\(old.day).log", "#general.log"], "still one file a day: \(filesAfter)")
            let oldAfter = (try? String(contentsOf: previous, encoding: .utf8)) ?? ""
            #expect(oldAfter == oldText, "yesterday's file is as it was:\n\(oldAfter)")
            let newAfter = (try? String(contentsOf: current, encoding: .utf8)) ?? ""
            #expect(newAfter.hasPrefix(newText) && newAfter.contains(" <bob> the next morning"),
                    "today's file goes on, the backlog in it under its own date:\n\(newAfter)")
        }
    }
}
