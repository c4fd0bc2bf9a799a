// libedit's native API (histedit.h) for chat-client: the wide-character editor, history and
// nothing of its readline emulation (readline.c), whose rl_line_buffer dangles once a line
// outgrows its 1 KiB conversion buffer (docs/CLIENT.md).
//
// el_wset and history_w are variadic, which Swift cannot call, so each use the client makes
// has a fixed-argument wrapper here.
#include <histedit.h>
#include <langinfo.h>
#include <locale.h>
#include <stdio.h>
#include <wchar.h>

/// An editor function added with EL_ADDFN (histedit.h gives its type only in a comment).
typedef unsigned char (*chat_el_function)(EditLine *, int);
/// A wide prompt function for EL_PROMPT_ESC.
typedef wchar_t *(*chat_el_prompt_function)(EditLine *);

/// Emacs keys: the default, which the user's editrc may change (`bind -v`) before we bind ours.
static inline int chat_el_use_emacs(EditLine *el) { return el_wset(el, EL_EDITOR, L"emacs"); }

/// Reads the user's editrc as libedit chooses it: $EDITRC, else ~/.editrc; -1 when there is none.
static inline int chat_el_source_editrc(EditLine *el) { return el_source(el, NULL); }

/// Whether the editor is vi (`bind -v` in the user's editrc).
static inline int chat_el_is_vi(EditLine *el) {
    const wchar_t *name = NULL;
    if (el_wget(el, EL_EDITOR, &name) != 0 || name == NULL) return 0;
    return wcscmp(name, L"vi") == 0;
}

/// The prompt function; text between two `literal` characters is written as it is, taking no
/// cells (the status line's colour codes).
static inline int chat_el_set_prompt(EditLine *el, chat_el_prompt_function prompt, wchar_t literal) {
    return el_wset(el, EL_PROMPT_ESC, prompt, literal);
}

/// The function libedit calls for each character instead of reading the terminal itself.
static inline int chat_el_set_getc(EditLine *el, el_rfunc_t getc) { return el_wset(el, EL_GETCFN, getc); }

/// libedit's history for Up/Down and the incremental search.
static inline int chat_el_set_history(EditLine *el, HistoryW *history) { return el_wset(el, EL_HIST, history_w, history); }

/// A named editor function the client implements.
static inline int chat_el_add_function(EditLine *el, const wchar_t *name, const wchar_t *help, chat_el_function function) {
    return el_wset(el, EL_ADDFN, name, help, function);
}

/// Binds a key sequence (libedit's notation: "^W", "\\e2", "\\e[1;5D") to a function by name,
/// in the main map (emacs's, or vi's insert mode).
static inline int chat_el_bind(EditLine *el, const wchar_t *keys, const wchar_t *function) {
    return el_wset(el, EL_BIND, keys, function, (const wchar_t *)NULL);
}

/// The same in the alternate map: vi's command mode (`bind -a`).
static inline int chat_el_bind_alternate(EditLine *el, const wchar_t *keys, const wchar_t *function) {
    return el_wset(el, EL_BIND, L"-a", keys, function, (const wchar_t *)NULL);
}

/// Takes a terminal mode off while editing (`setty -d -isig`): Ctrl-C and Ctrl-Z must arrive
/// as keys, and Ctrl-S/Ctrl-Q must not stop the output.
static inline int chat_el_clear_edit_mode(EditLine *el, const wchar_t *mode) {
    return el_wset(el, EL_SETTY, L"-d", mode, (const wchar_t *)NULL);
}

/// Forgets where libedit thinks the cursor is and draws prompt and line from the cursor's
/// place: for after the client cleared the screen or printed above the line.
static inline int chat_el_refresh(EditLine *el) { return el_wset(el, EL_REFRESH); }

/// At most `size` entries, and no entry twice in a row.
static inline int chat_history_configure(HistoryW *history, int size) {
    HistEventW event;
    if (history_w(history, &event, H_SETSIZE, size) < 0) return -1;
    return history_w(history, &event, H_SETUNIQUE, 1);
}

/// Adds an entry as the newest.
static inline int chat_history_enter(HistoryW *history, const wchar_t *line) {
    HistEventW event;
    return history_w(history, &event, H_ENTER, line);
}

/// The oldest entry (`H_LAST`), then each newer one (`H_PREV`); NULL past the end.
static inline const wchar_t *chat_history_oldest(HistoryW *history) {
    HistEventW event;
    return history_w(history, &event, H_LAST) < 0 ? NULL : event.str;
}
static inline const wchar_t *chat_history_newer(HistoryW *history) {
    HistEventW event;
    return history_w(history, &event, H_PREV) < 0 ? NULL : event.str;
}

/// The UTF-8 length of the wide characters in [from, to): what the line will weigh as a message.
static inline long chat_utf8_length(const wchar_t *from, const wchar_t *to) {
    long bytes = 0;
    for (; from < to; from++) {
        unsigned int c = (unsigned int)*from;
        bytes += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    }
    return bytes;
}

/// Whether [from, to) holds a character two cells wide (CJK, most emoji).
static inline int chat_has_double_width(const wchar_t *from, const wchar_t *to) {
    for (; from < to; from++) {
        if (*from >= 0x1100 && wcwidth(*from) > 1) return 1;
    }
    return 0;
}
