package http

import (
	"reflect"
	"testing"

	"github.com/budgetd/budgetd/api"
)

// TestLevelsViewIsTheAPIType: the level series renders as api.LevelSeries.
func TestLevelsViewIsTheAPIType(t *testing.T) {
	sameWire(t, "LevelSeries", reflect.TypeFor[levelsView](), reflect.TypeFor[api.LevelSeries](), false)
	sameWire(t, "LevelPoint", reflect.TypeFor[levelPointView](), reflect.TypeFor[api.LevelPoint](), false)
}
