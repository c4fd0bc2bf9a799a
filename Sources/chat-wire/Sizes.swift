import ArgumentParser
import ChatProtocol
import ChatWireComparison
import Foundation

/// `chat-wire sizes`: the byte-count table of docs/PROTOCOL.md, built from real messages.
struct Sizes: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Compare our frame sizes with SOAP 1.1, SOAP 1.2, JSON over HTTP and IRC.",
        discussion: """
            For each representative operation ("hello" to a room, a 100-byte message, a \
            direct message, a join, a presence event, a history replay of 50 messages) this \
            builds our frame and the equivalent SOAP 1.1 and SOAP 1.2 HTTP messages (ASMX \
            style), a JSON-over-HTTP message and IRC lines, then prints each one's size in \
            bytes and how many times larger than our frame it is. Client-to-server \
            operations compare requests; server-to-client ones compare the HTTP response a \
            polling client would receive. "Overhead" is the bytes of our frame that are \
            neither user text nor names.
            """)

    @Flag(help: "Print a Markdown table, as pasted into docs/PROTOCOL.md.")
    var markdown = false

    @Flag(help: "Also print every message compared, byte for byte (CRLF shown as \\r\\n).")
    var showMessages = false

    func run() {
        let operations = WireComparison.representativeOperations()
        print(markdown ? markdownTable(operations) : plainTable(operations), terminator: "")
        if showMessages { printMessages(operations) }
    }

    private func cells(_ operation: WireComparison.Operation) -> [String] {
        let ours = operation.frameByteCount
        func compared(_ text: String) -> String {
            let count = text.utf8.count
            return "\(count) (\(String(format: "%.1f", Double(count) / Double(ours)))×)"
        }
        return [
            operation.name, operation.clientToServer ? "C→S" : "S→C", "\(ours)", "\(operation.frameOverhead)",
            compared(operation.soap11), compared(operation.soap12), compared(operation.jsonHTTP),
            compared(operation.irc),
        ]
    }

    private static let headers = ["Operation", "Dir", "Ours", "Overhead", "SOAP 1.1", "SOAP 1.2", "JSON/HTTP", "IRC"]

    private func plainTable(_ operations: [WireComparison.Operation]) -> String {
        let rows = [Self.headers] + operations.map(cells)
        let widths = Self.headers.indices.map { column in rows.map { $0[column].count }.max() ?? 0 }
        let lines = rows.map { row in
            row.indices.map { row[$0].padding(toLength: widths[$0], withPad: " ", startingAt: 0) }
                .joined(separator: "  ")
        }
        return lines.joined(separator: "\n") + "\n\nBytes on the wire; (N×) = times larger than our frame.\n"
    }

    private func markdownTable(_ operations: [WireComparison.Operation]) -> String {
        let rows = [Self.headers, Self.headers.indices.map { $0 < 2 ? "---" : "---:" }] + operations.map(cells)
        return rows.map { "| " + $0.joined(separator: " | ") + " |" }.joined(separator: "\n") + "\n"
    }

    private func printMessages(_ operations: [WireComparison.Operation]) {
        for operation in operations {
            let hex = FrameEncoder.encode(operation.frame).map { String(format: "%02x", $0) }.joined(separator: " ")
            print("\n== \(operation.name)\n-- ours (\(operation.frameByteCount) bytes)\n\(hex)")
            for (name, text) in [
                ("SOAP 1.1", operation.soap11), ("SOAP 1.2", operation.soap12),
                ("JSON/HTTP", operation.jsonHTTP), ("IRC", operation.irc),
            ] {
                print("-- \(name) (\(text.utf8.count) bytes)")
                print(text.replacingOccurrences(of: "\r\n", with: "\\r\\n\n"))
            }
        }
    }
}
