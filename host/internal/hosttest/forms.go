package hosttest

import (
	"html"
	"net/url"
	"regexp"
	"strings"
)

var hiddenRE = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// HiddenFields returns the hidden fields of the form with this id on an
// HTML page (nil when the page has no such form), or of the whole page
// when id is "".
func HiddenFields(page, id string) url.Values {
	if id != "" {
		i := strings.Index(page, `id="`+id+`"`)
		if i < 0 {
			return nil
		}
		page = page[i:]
		if j := strings.Index(page, "</form>"); j >= 0 {
			page = page[:j]
		}
	}
	v := url.Values{}
	for _, m := range hiddenRE.FindAllStringSubmatch(page, -1) {
		v.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	return v
}
