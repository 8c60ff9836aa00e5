# embed.awk - each file named on the command line as a C string,
# live_page_<base>_<ext> ("index.html": live_page_index_html), for
# daemon/live_page.c. Run by Makefile.am into daemon/live_page_assets.h.
FNR == 1 {
    if (NR > 1)
        print ";"
    name = FILENAME
    sub(/.*\//, "", name)
    gsub(/[^A-Za-z0-9]/, "_", name)
    print "static const char live_page_" name "[] ="
    print "    \"\""
}
{
    # Character by character: gsub's replacement text treats backslashes
    # differently from one awk to another.
    out = ""
    for (i = 1; i <= length($0); i++) {
        c = substr($0, i, 1)
        if (c == "\\" || c == "\"" || c == "?")
            out = out "\\" c          # "??" could start a trigraph
        else
            out = out c
    }
    print "    \"" out "\\n\""
}
END {
    print ";"
}
