import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

extension TerminalTests {
    /// Scrolling by screen rows, and lines taller than the screen, in a small real terminal.
    ///
    /// Times are written `-` (`timestamp_format = "-"`), so every row on screen is known in
    /// advance: a line is cut into rows here by counting characters, independently of the
    /// client's own `TerminalText.rows` — the texts have no space to wrap at, so a row is full,
    /// and the rows after the first start under the text (`- <bob> `, 8 columns in).
    @Suite(.serialized) struct Scrolling {
        /// A config file that writes every time as `-`; the caller removes `directory`.
        static func constantTimesConfig(in directory: URL) throws -> String {
            let file = directory.appendingPathComponent("config.toml")
            try "timestamp_format = \"-\"\n".write(to: file, atomically: true, encoding: .utf8)
            return file.path
        }

        /// `line` cut into rows of `columns` characters, the rows after the first indented by
        /// `indent` spaces (ASCII only, with no space after the indent to wrap at).
        static func rows(_ line: String, columns: Int, indent: Int = "- <bob> ".count) -> [String] {
            var rows = [String(line.prefix(columns))]
            var rest = line.dropFirst(columns)
            while !rest.isEmpty {
                rows.append(String(repeating: " ", count: indent) + rest.prefix(columns - indent))
                rest = rest.dropFirst(columns - indent)
            }
            return rows
        }

        /// The rows above the status line and the input line, of a screen `height` rows high.
        static func window(_ screen: [String], height: Int) -> [String] {
            Array(screen.prefix(height - 2))
        }

        /// Resizes the window and waits until its terminal has the new size.
        ///
        /// tmux shows the new size at once but sets the terminal's (the size the client reads)
        /// a moment later: a page key pressed in between was measured against the old height.
        static func resize(_ tmux: TmuxSession, columns: Int, rows: Int) async throws {
            try await tmux.tmux(["resize-window", "-x", "\(columns)", "-y", "\(rows)"])
            let tty = try await tmux.format("#{pane_tty}")
            let applied = await eventually(timeout: .seconds(30)) {
                let descriptor = open(tty, O_RDONLY | O_NOCTTY | O_NONBLOCK)
                guard descriptor >= 0 else { return false }
                defer { close(descriptor) }
                var size = winsize()
                return ioctl(descriptor, UInt(TIOCGWINSZ), &size) == 0 && Int(size.ws_col) == columns && Int(size.ws_row) == rows
            }
            #expect(applied, "\(tty) is \(columns)×\(rows)")
        }

        /// Waits until the window shows exactly `expected`, top to bottom.
        static func waitForWindow(_ tmux: TmuxSession, _ expected: [String], height: Int, _ what: String) async throws {
            try await tmux.waitForScreen("\(what):\n\(expected.joined(separator: "\n"))", timeout: .seconds(60)) { screen in
                window(screen, height: height) == expected
            }
        }

        @Test func pageUpAndPageDownMoveByScreenRows() async throws {
            let directory = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: directory) }
            let config = try Self.constantTimesConfig(in: directory)
            try await TerminalTests.start(clientArguments: ["--config", config]) { _, tmux, bob, _ in
                try await Self.resize(tmux, columns: 40, rows: 12)
                // Short lines take a row, long ones three (105 characters at 40 columns).
                let texts = (1...12).map { index in
                    index.isMultiple(of: 2)
                        ? "long" + (1...17).map { String(format: "%02d%02d", index, $0) }.joined(separator: ".")
                        : "short \(index)"
                }
                for text in texts { try await bob.say(text) }
                let rows = texts.flatMap { Self.rows("- <bob> " + $0, columns: 40) }
                #expect(rows.count == 24)
                try await Self.waitForWindow(tmux, Array(rows.suffix(10)), height: 12, "the last 10 rows")

                // 10 rows on screen: a page is 9 rows, so the top row stays, at the bottom. It is
                // the middle row of a long line: a page ends inside a line, not at one's end.
                try await tmux.press("PPage")
                #expect(!rows[14].hasPrefix("- <bob>"), "the row kept is a line's middle row: \(rows[14])")
                try await Self.waitForWindow(tmux, Array(rows[5..<15]), height: 12, "a page back by rows, with one row kept")
                try await tmux.waitForScreen("-- more --") { $0.contains { $0.hasPrefix("alice -- more --") } }

                try await tmux.press("NPage")
                try await Self.waitForWindow(tmux, Array(rows.suffix(10)), height: 12, "the last 10 rows again")
                try await tmux.waitForScreen("the status line without -- more --") { $0.contains { $0.hasPrefix("alice | ") } }
            }
        }

        @Test func aLineTallerThanTheScreenShowsThePartThatFits() async throws {
            let directory = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: directory) }
            let config = try Self.constantTimesConfig(in: directory)
            try await TerminalTests.start(clientArguments: ["--config", config]) { _, tmux, bob, _ in
                // 20×6: 4 rows for the window, and a page of 3.
                try await Self.resize(tmux, columns: 20, rows: 6)
                let tall = (0..<51).map { String(format: "%03d,", $0) }.joined()
                #expect(tall.count == 204)
                try await bob.say("before tall")
                try await bob.say(tall)
                // 1 row, then 17: 12 characters after `- <bob> `, and 16 rows of 12 under them.
                let rows = Self.rows("- <bob> before tall", columns: 20) + Self.rows("- <bob> " + tall, columns: 20)
                #expect(rows.count == 18)
                try await Self.waitForWindow(tmux, Array(rows[14..<18]), height: 6, "the tall line's last rows as it arrives")

                // Ctrl-L and a resize draw the screen anew from the lines: the tall line must not be
                // left out because it does not fit whole (it was, and the window showed nothing).
                try await tmux.press("C-l")
                try await Self.waitForWindow(tmux, Array(rows[14..<18]), height: 6, "the tall line's last rows after Ctrl-L")
                try await Self.resize(tmux, columns: 20, rows: 7)
                try await Self.waitForWindow(tmux, Array(rows[13..<18]), height: 7, "the last 5 rows on a taller screen")
                try await Self.resize(tmux, columns: 20, rows: 6)
                try await Self.waitForWindow(tmux, Array(rows[14..<18]), height: 6, "the last 4 rows again")

                // Paging back walks through the tall line 3 rows at a time, to its first rows and
                // the line before it.
                for (page, bottom) in [14, 11, 8, 5, 2].enumerated() {
                    try await tmux.press("PPage")
                    let expected = bottom >= 3 ? Array(rows[(bottom - 3)...bottom]) : Array(rows[0...bottom])
                    try await tmux.waitForScreen("page \(page + 1) back, ending at row \(bottom):\n\(expected.joined(separator: "\n"))",
                                                 timeout: .seconds(60)) { screen in
                        Array(Self.window(screen, height: 6).suffix(expected.count)) == expected
                    }
                }
                try await tmux.waitForScreen("-- more --") { $0.contains { $0.contains("-- more --") } }
                for _ in 0..<5 { try await tmux.press("NPage") }
                try await Self.waitForWindow(tmux, Array(rows[14..<18]), height: 6, "the end again")
                try await tmux.waitForScreen("the status line without -- more --") { !$0.contains { $0.contains("-- more --") } }
            }
        }
    }
}
