/// The status line above the input line: who we are, the current window, and what happened
/// in the others.
///
/// `alice | [1:#general] 2:#dev(3) 3:#ops(1!) 4:bob(2!) | 127.0.0.1:7002 | TLS 1.3` — windows
/// are numbered as Alt-1…9 selects them; the current one is in brackets; another window shows
/// how many messages arrived there unseen, and `!` when one of them mentions us or is a direct
/// message. The server is named when the client has several to choose from; `offline` stands in
/// for server and encryption while reconnecting; `-- more --` while the window is scrolled
/// back. A room we were kicked from (or refused), whose window is still open, reads `#mod(out)`. When the line is too long, quiet windows are left out first, then those with unread
/// messages (the fewest first), and `+3` says how many are not shown; the current window and
/// windows with a mention are never left out. When even those do not fit (a narrow terminal),
/// the windows go by number alone — `alice | [1] 3(1) 8(1!) +5`, the input line's prompt
/// naming the current one — and the server's name is left out, so a mention is still seen.
public enum StatusLine {
    /// The status line for `session`, at most `columns` cells wide; `scrolledBack` when the
    /// current window does not show its newest lines.
    public static func render(session: ClientSession, columns: Int, scrolledBack: Bool = false) -> String {
        let full = layout(session: session, columns: columns, scrolledBack: scrolledBack, compact: false)
        if full.fits { return full.line }
        return layout(session: session, columns: columns, scrolledBack: scrolledBack, compact: true).line
    }

    /// The line with windows named (`2:#dev(1!)`) or, `compact`, by number alone (`2(1!)`) and
    /// without the server's name; and whether the windows that must stay fit in `columns`.
    private static func layout(session: ClientSession, columns: Int, scrolledBack: Bool, compact: Bool) -> (line: String, fits: Bool) {
        var head = session.nick
        if session.awayMessage != nil { head += " (away)" }
        if scrolledBack { head += " -- more --" }
        var tail: [String] = []
        if !session.isConnected {
            tail.append("offline")
        } else {
            if let server = session.server, !compact { tail.append(server) }
            if let encryption = session.encryption { tail.append(encryption) }
        }

        // How much each window wants to stay: the higher, the later it is dropped.
        var items: [(text: String, keep: Int)] = []
        for (index, window) in session.windows.enumerated() {
            var label = compact ? "\(index + 1)" : "\(index + 1):\(window.title)"
            if case .room(let room) = window, session.removal(from: room) != nil { label += "(out)" }
            if window == session.currentWindow {
                items.append(("[\(label)]", Int.max))
            } else if let activity = session.activity[window], activity.unread > 0 || activity.mentioned {
                items.append(("\(label)(\(activity.unread)\(activity.mentioned ? "!" : ""))", activity.mentioned ? Int.max : activity.unread))
            } else {
                items.append((label, 0))
            }
        }
        if session.windows.isEmpty { items.append(("(no window; /join #room)", Int.max)) }

        // Widths are measured once and the line assembled once: with hundreds of windows this
        // runs after every frame, so dropping windows must not measure the line again each time.
        let fixed = TerminalText.cellWidth(of: ([head, ""] + tail).joined(separator: " | "))
        let widths = items.map { TerminalText.cellWidth(of: $0.text) }
        var shown = Array(repeating: true, count: items.count)
        var windowsWidth = widths.reduce(0, +) + max(0, items.count - 1)
        var hidden = 0
        func total() -> Int { fixed + windowsWidth + (hidden > 0 ? 1 + String(hidden).count + 1 : 0) }
        // Drop the least wanted first; among equals, the furthest from the start.
        let dropOrder = items.indices.filter { items[$0].keep != Int.max }.sorted {
            items[$0].keep != items[$1].keep ? items[$0].keep < items[$1].keep : $0 > $1
        }
        for index in dropOrder where total() > columns {
            shown[index] = false
            windowsWidth -= widths[index] + 1
            hidden += 1
        }
        // The last resort, before the line is cut at the edge: the windows that must stay, without
        // the count of those left out (cut, it would read `+`).
        let count = hidden > 0 && !(compact && total() > columns) ? ["+\(hidden)"] : []
        if count.isEmpty { hidden = 0 }
        let windows = items.indices.filter { shown[$0] }.map { items[$0].text } + count
        let line = ([head, windows.joined(separator: " ")] + tail).joined(separator: " | ")
        return (TerminalText.prefix(of: TerminalText.sanitized(line), fitting: max(0, columns)), total() <= columns)
    }
}
