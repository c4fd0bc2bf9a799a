/// The status line above the input line: who we are, the current window, and what happened
/// in the others.
///
/// `alice | [1:#general] 2:#dev(3) 3:#ops(1!) 4:bob(2!) | 127.0.0.1:7002 | TLS 1.3` — windows
/// are numbered as Alt-1…9 selects them; the current one is in brackets; another window shows
/// how many messages arrived there unseen, and `!` when one of them mentions us or is a direct
/// message. The server is named when the client has several to choose from; `offline` stands in
/// for server and encryption while reconnecting; `-- more --` while the window is scrolled
/// back. When the line is too long, quiet windows are left out first, then those with unread
/// messages (the fewest first), and `+3` says how many are not shown; the current window and
/// windows with a mention are never left out.
public enum StatusLine {
    /// The status line for `session`, at most `columns` cells wide; `scrolledBack` when the
    /// current window does not show its newest lines.
    public static func render(session: ClientSession, columns: Int, scrolledBack: Bool = false) -> String {
        var head = session.nick
        if session.awayMessage != nil { head += " (away)" }
        if scrolledBack { head += " -- more --" }
        var tail: [String] = []
        if !session.isConnected {
            tail.append("offline")
        } else {
            if let server = session.server { tail.append(server) }
            if let encryption = session.encryption { tail.append(encryption) }
        }

        // How much each window wants to stay: the higher, the later it is dropped.
        var items: [(text: String, keep: Int)] = []
        for (index, window) in session.windows.enumerated() {
            let label = "\(index + 1):\(window.title)"
            if window == session.currentWindow {
                items.append(("[\(label)]", Int.max))
            } else if let activity = session.activity[window], activity.unread > 0 || activity.mentioned {
                items.append(("\(label)(\(activity.unread)\(activity.mentioned ? "!" : ""))", activity.mentioned ? Int.max : activity.unread))
            } else {
                items.append((label, 0))
            }
        }
        if session.windows.isEmpty { items.append(("(no window; /join #room)", Int.max)) }

        func assemble(_ shown: [String], hidden: Int) -> String {
            let windows = (shown + (hidden > 0 ? ["+\(hidden)"] : [])).joined(separator: " ")
            return ([head, windows] + tail).joined(separator: " | ")
        }
        var shown = Array(items.indices)
        var line = assemble(items.map(\.text), hidden: 0)
        // Drop the least wanted first; among equals, the furthest from the start.
        let dropOrder = items.indices.filter { items[$0].keep != Int.max }.sorted {
            items[$0].keep != items[$1].keep ? items[$0].keep < items[$1].keep : $0 > $1
        }
        for index in dropOrder where TerminalText.cellWidth(of: line) > columns {
            shown.removeAll { $0 == index }
            line = assemble(shown.map { items[$0].text }, hidden: items.count - shown.count)
        }
        return TerminalText.prefix(of: TerminalText.sanitized(line), fitting: max(0, columns))
    }
}
