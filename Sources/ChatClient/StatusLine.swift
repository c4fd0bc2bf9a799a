/// The status line above the input line: who we are, the current window, and what happened
/// in the others.
///
/// `alice | [1:#general] 2:#dev(3) 3:#ops(1!) 4:bob(2!) | 127.0.0.1:7002 | TLS 1.3` — windows
/// are numbered as Alt-1…9 selects them; the current one is in brackets; another window shows
/// how many messages arrived there unseen, and `!` when one of them mentions us or is a direct
/// message. The server is named when the client has several to choose from; `offline` stands in
/// for server and encryption while reconnecting. When the line is too long, quiet windows are
/// left out before windows with news.
public enum StatusLine {
    /// The status line for `session`, at most `columns` cells wide.
    public static func render(session: ClientSession, columns: Int) -> String {
        var head = session.nick
        if session.awayMessage != nil { head += " (away)" }
        var tail: [String] = []
        if !session.isConnected {
            tail.append("offline")
        } else {
            if let server = session.server { tail.append(server) }
            if let encryption = session.encryption { tail.append(encryption) }
        }

        var items: [(text: String, quiet: Bool)] = []
        for (index, window) in session.windows.enumerated() {
            let label = "\(index + 1):\(window.title)"
            if window == session.currentWindow {
                items.append(("[\(label)]", false))
            } else if let activity = session.activity[window], activity.unread > 0 || activity.mentioned {
                items.append(("\(label)(\(activity.unread)\(activity.mentioned ? "!" : ""))", false))
            } else {
                items.append((label, true))
            }
        }
        if session.windows.isEmpty { items.append(("(no window; /join #room)", false)) }

        func assemble(_ shown: [(text: String, quiet: Bool)]) -> String {
            ([head, shown.map(\.text).joined(separator: " ")] + tail).joined(separator: " | ")
        }
        var line = assemble(items)
        if TerminalText.cellWidth(of: line) > columns {
            line = assemble(items.filter { !$0.quiet })
        }
        return TerminalText.prefix(of: TerminalText.sanitized(line), fitting: max(0, columns))
    }
}
